// jetflow dashboard: a single page on the JSON API next to it. Routes live
// in the URL fragment (#/dlq, #/task/ID ...), so every request is relative to
// the page and the dashboard works under any mount path. All text from the
// API goes into the page through textContent, never as HTML.
"use strict";

const main = document.getElementById("main");
let config = { read_only: true, refresh_ms: 2000, request_header: "X-Jetflow-Request", priorities: [] };
let timer = null;
let renderSeq = 0;

// ---- helpers -------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElementNS(tag.startsWith("svg:") ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml",
    tag.replace(/^svg:/, ""));
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function api(path, opts) {
  const init = { headers: { Accept: "application/json" } };
  if (opts && opts.method) {
    init.method = opts.method;
    init.headers[config.request_header] = "1";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(opts.body || {});
  }
  const res = await fetch(path, init);
  let body = {};
  try { body = await res.json(); } catch (e) { body = { error: res.statusText }; }
  if (!res.ok) {
    const err = new Error(body.error || res.statusText);
    err.status = res.status;
    throw err;
  }
  return body;
}

function banner(msg) {
  const b = document.getElementById("banner");
  b.textContent = msg || "";
  b.hidden = !msg;
}

function fmtNum(n) { return Number(n || 0).toLocaleString("en-US"); }

function fmtAge(sec) {
  sec = Math.max(0, Math.round(sec));
  if (sec < 60) return sec + "s";
  const m = Math.floor(sec / 60), s = sec % 60;
  if (m < 60) return m + "m " + s + "s";
  const h = Math.floor(m / 60);
  if (h < 48) return h + "h " + (m % 60) + "m";
  return Math.floor(h / 24) + "d " + (h % 24) + "h";
}

function fmtTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function relTime(iso) {
  if (!iso) return "";
  const diff = (new Date(iso).getTime() - Date.now()) / 1000;
  return diff >= 0 ? "in " + fmtAge(diff) : fmtAge(-diff) + " ago";
}

function timeCell(iso) {
  return el("td", { title: fmtTime(iso), "data-time": iso || "" }, iso ? relTime(iso) : "");
}

function badge(state) { return el("span", { class: "badge " + state, text: state }); }

function confirmAction(text) {
  return new Promise((resolve) => {
    const m = document.getElementById("modal");
    document.getElementById("modal-text").textContent = text;
    m.hidden = false;
    const ok = document.getElementById("modal-ok"), cancel = document.getElementById("modal-cancel");
    const done = (v) => { m.hidden = true; ok.onclick = null; cancel.onclick = null; resolve(v); };
    ok.onclick = () => done(true);
    cancel.onclick = () => done(false);
  });
}

// act runs a confirmed mutation and refreshes the page.
async function act(text, path, body) {
  if (text && !(await confirmAction(text))) return null;
  try {
    const out = await api(path, { method: "POST", body });
    banner("");
    refresh();
    return out;
  } catch (e) {
    banner(e.message);
    return null;
  }
}

function table(cols, rows, empty) {
  if (!rows.length) return el("div", { class: "empty", text: empty || "Nothing here." });
  return el("table", {},
    el("thead", {}, el("tr", {}, cols.map((c) => el("th", { class: c.num ? "num" : null, text: c.label })))),
    el("tbody", {}, rows));
}

function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined && v !== null) u.set(k, v);
  const s = u.toString();
  return s ? "?" + s : "";
}

// ---- charts --------------------------------------------------------------

const palette = ["#2f6fde", "#1f9d55", "#d98a00", "#d64545", "#7a4fd6", "#0f9bb5", "#c2417a", "#6b7c93"];
const history = []; // {t, queues: {key: {delivered, waiting}}}
const maxPoints = 90;

function record(ov) {
  const t = new Date(ov.taken).getTime();
  const queues = {};
  for (const q of ov.queues) queues[q.type + "/" + q.priority] = { delivered: q.delivered, waiting: q.waiting };
  if (history.length && history[history.length - 1].t >= t) return;
  history.push({ t, queues });
  if (history.length > maxPoints) history.shift();
}

// series returns one line per queue: rates of delivered, or waiting.
function series(kind) {
  const keys = new Set();
  for (const h of history) for (const k of Object.keys(h.queues)) keys.add(k);
  const out = [];
  for (const k of [...keys].sort()) {
    const pts = [];
    for (let i = 0; i < history.length; i++) {
      const cur = history[i].queues[k];
      if (!cur) continue;
      if (kind === "rate") {
        const prev = i > 0 ? history[i - 1].queues[k] : null;
        if (!prev) continue;
        const dt = (history[i].t - history[i - 1].t) / 1000;
        pts.push([history[i].t, dt > 0 ? Math.max(0, cur.delivered - prev.delivered) / dt : 0]);
      } else {
        pts.push([history[i].t, cur.waiting]);
      }
    }
    out.push({ name: k, pts });
  }
  // Only queues that moved, the busiest first, at most the palette's size.
  const peak = (s) => s.pts.reduce((m, p) => Math.max(m, p[1]), 0);
  return out.filter((s) => peak(s) > 0).sort((a, b) => peak(b) - peak(a)).slice(0, palette.length)
    .sort((a, b) => a.name.localeCompare(b.name));
}

function lineChart(title, id, list, unit) {
  const W = 600, H = 170, L = 44, R = 8, T = 8, B = 20;
  const all = list.flatMap((s) => s.pts);
  const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", "data-chart": id });
  const t0 = all.length ? Math.min(...all.map((p) => p[0])) : 0;
  const t1 = all.length ? Math.max(...all.map((p) => p[0])) : 1;
  const vmax = Math.max(1, ...all.map((p) => p[1]));
  const x = (t) => L + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - L - R);
  const y = (v) => T + (1 - v / vmax) * (H - T - B);
  for (const f of [0, 0.5, 1]) {
    svg.append(el("svg:line", { x1: L, x2: W - R, y1: y(vmax * f), y2: y(vmax * f), stroke: "#e3e6eb" }));
    svg.append(el("svg:text", { x: L - 6, y: y(vmax * f) + 4, "text-anchor": "end", fill: "#667085", "font-size": 11,
      text: (vmax * f >= 10 ? Math.round(vmax * f) : Math.round(vmax * f * 10) / 10) + "" }));
  }
  list.forEach((s, i) => {
    if (!s.pts.length) return;
    const d = s.pts.map((p, j) => (j ? "L" : "M") + x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1)).join(" ");
    svg.append(el("svg:path", { d, fill: "none", stroke: palette[i % palette.length], "stroke-width": 2, "data-series": s.name }));
  });
  const legend = el("div", { class: "legend" }, list.map((s, i) => {
    const last = s.pts.length ? s.pts[s.pts.length - 1][1] : 0;
    return el("span", {}, el("i", { style: "background:" + palette[i % palette.length] }),
      s.name + " " + (Math.round(last * 10) / 10) + unit);
  }));
  return el("div", { class: "chart", id }, el("div", { class: "title", text: title }), svg, legend);
}

// ---- pages ---------------------------------------------------------------

const pages = {};

pages.overview = {
  title: "Overview",
  async load() {
    const ov = await api("api/overview");
    record(ov);
    const totals = ov.queues.reduce((a, q) => {
      a.waiting += q.waiting; a.inflight += q.in_flight; return a;
    }, { waiting: 0, inflight: 0 });
    const oldest = ov.queues.reduce((m, q) => Math.max(m, q.oldest_waiting_seconds || 0), 0); // no spread: any number of queues
    const card = (id, label, value) => el("div", { class: "card", id: "card-" + id },
      el("div", { class: "label", text: label }), el("div", { class: "value", "data-value": value, text: typeof value === "number" ? fmtNum(value) : value }));
    const idle = (q) => !q.waiting && !q.in_flight && !q.scheduled && !q.delivered && !q.paused;
    const shown = ov.queues.filter((q) => !idle(q));
    const rates = series("rate");
    const deadShown = new Set();
    const rows = shown.map((q) => {
      const key = q.type + "/" + q.priority;
      const rate = rates.find((s) => s.name === key);
      const firstOfType = !deadShown.has(q.type);
      deadShown.add(q.type);
      const r = rate && rate.pts.length ? rate.pts[rate.pts.length - 1][1] : 0;
      return el("tr", { "data-queue": key, class: q.paused ? "paused" : null },
        el("td", { text: q.type }), el("td", { text: q.priority }),
        el("td", { class: "num", "data-col": "waiting", text: fmtNum(q.waiting) }),
        el("td", { class: "num", "data-col": "in_flight", text: fmtNum(q.in_flight) }),
        el("td", { class: "num", "data-col": "scheduled", text: fmtNum(q.scheduled) }),
        el("td", { class: "num", "data-col": "oldest", text: q.oldest_waiting_seconds ? fmtAge(q.oldest_waiting_seconds) : "" }),
        el("td", { class: "num", "data-col": "rate", text: (Math.round(r * 10) / 10) + "/s" }),
        el("td", { class: "num", "data-col": "dead", title: "dead letters of the type, all priorities", text: firstOfType ? fmtNum(ov.dead[q.type] || 0) : "" }),
        el("td", { class: "num", "data-col": "workers", title: "live workers serving the queue", text: ov.registry ? fmtNum(q.workers) : "—" }),
        el("td", { "data-col": "state" }, q.no_worker ? badge("no-worker") : null, q.no_worker ? " " : null,
          q.paused ? badge("paused") : q.consumer ? badge("ok") : el("span", { class: "muted", text: "no consumer" })));
    });
    return [
      el("div", { class: "cards" },
        card("waiting", "Waiting", totals.waiting), card("inflight", "In flight", totals.inflight),
        card("scheduled", "Scheduled", ov.scheduled), card("dead", "Dead letters", ov.dead_total),
        card("paused", "Paused queues", ov.paused), card("cron", "Cron schedules", ov.cron),
        card("oldest", "Oldest waiting", oldest ? fmtAge(oldest) : "—")),
      el("div", { class: "charts" },
        lineChart("Throughput (deliveries/s)", "chart-throughput", series("rate"), "/s"),
        lineChart("Backlog (waiting tasks)", "chart-backlog", series("waiting"), "")),
      el("h2", { text: "Queues" }),
      table([{ label: "Type" }, { label: "Priority" }, { label: "Waiting", num: 1 }, { label: "In flight", num: 1 },
        { label: "Scheduled", num: 1 }, { label: "Oldest waiting", num: 1 }, { label: "Rate", num: 1 },
        { label: "Dead (type)", num: 1 }, { label: "Workers", num: 1 }, { label: "State" }], rows, "No busy queue: start a worker or enqueue a task."),
      shown.some((q) => q.no_worker) ? el("p", { class: "warn", id: "no-worker-note", text: "Tasks wait in a queue no live worker serves: start a worker of that type and priority (see Workers)." }) : null,
      shown.length < ov.queues.length ? el("p", { class: "muted", text: (ov.queues.length - shown.length) + " idle queues (nothing delivered, waiting or scheduled) are listed on the Queues page." }) : null,
    ];
  },
};

pages.queues = {
  title: "Queues",
  async load() {
    const ov = await api("api/overview");
    record(ov);
    const byType = new Map();
    for (const q of ov.queues) {
      if (!byType.has(q.type)) byType.set(q.type, {});
      byType.get(q.type)[q.priority] = q;
    }
    const cell = (type, p, q) => {
      if (!q) return el("td", { class: "cell muted", text: "—" });
      const key = type + "/" + p;
      const path = "api/queues/" + encodeURIComponent(type) + "/" + p + "/";
      let button = null;
      if (!config.read_only && q.consumer) {
        button = q.paused
          ? el("button", { "data-action": "resume", "data-queue": key, onclick: () => act(null, path + "resume") }, "Resume")
          : el("button", { class: "danger", "data-action": "pause", "data-queue": key,
            onclick: () => act("Pause queue " + key + "? No worker will get its tasks until it is resumed.", path + "pause") }, "Pause");
      }
      return el("td", { class: "cell", "data-queue": key, "data-paused": q.paused ? "true" : "false" },
        el("div", { class: "counts" },
          el("span", { title: "waiting", "data-col": "waiting", text: fmtNum(q.waiting) }), " · ",
          el("span", { title: "in flight", "data-col": "in_flight", text: fmtNum(q.in_flight) }), " · ",
          el("span", { title: "scheduled", "data-col": "scheduled", text: fmtNum(q.scheduled) })),
        q.paused ? el("div", {}, badge("paused"), " ", el("span", { class: "muted", text: "until " + (new Date(q.paused_until).getFullYear() > 2100 ? "resumed" : relTime(q.paused_until)) })) : null,
        button ? el("div", {}, button) : null);
    };
    const rows = [...byType.keys()].sort().map((type) => el("tr", { "data-type": type },
      el("th", { text: type }), config.priorities.map((p) => cell(type, p, byType.get(type)[p]))));
    const paused = ov.queues.filter((q) => q.paused);
    return [
      el("p", { class: "muted", text: "Each cell: waiting · in flight · scheduled. Pausing a queue pauses its consumer cluster-wide: running tasks finish, no worker gets new ones, and no attempts are spent." }),
      rows.length ? el("table", { class: "matrix" },
        el("thead", {}, el("tr", {}, el("th", { text: "Type" }), config.priorities.map((p) => el("th", { text: p })))),
        el("tbody", {}, rows)) : el("div", { class: "empty", text: "No queues yet." }),
      el("h2", { text: "Paused queues (" + paused.length + ")" }),
      table([{ label: "Queue" }, { label: "Waiting", num: 1 }, { label: "Until" }],
        paused.map((q) => el("tr", { "data-paused-queue": q.type + "/" + q.priority },
          el("td", { text: q.type + "/" + q.priority }), el("td", { class: "num", text: fmtNum(q.waiting) }),
          el("td", { text: new Date(q.paused_until).getFullYear() > 2100 ? "until resumed" : fmtTime(q.paused_until) }))),
        "No queue is paused."),
    ];
  },
};

pages.workers = {
  title: "Workers",
  async load(arg, q) {
    const out = await api("api/workers");
    if (!out.registry) return el("div", { class: "empty", text: "No worker registry: no worker of a jetflow version that announces itself has started." });
    const type = q.get("type") || "";
    const shown = out.workers.filter((w) => !type || w.types.some((t) => t.type === type));
    const taken = new Date(out.taken).getTime();
    const rows = shown.map((w) => el("tr", { "data-worker": w.id },
      el("td", {}, el("code", { text: w.id })), el("td", { text: w.host }), el("td", { class: "num", text: w.pid }),
      el("td", { text: w.version }),
      el("td", {}, w.types.map((t) => el("div", {},
        el("a", { href: "#/workers?type=" + encodeURIComponent(t.type), text: t.type }),
        el("span", { class: "muted", text: " " + t.priorities.join(", ") + " · " + t.concurrency + " slots" +
          (t.versions && t.versions.length ? " · payload v" + t.versions.join(", v") : "") })))),
      el("td", { class: "num", "data-col": "busy", text: w.busy + " / " + w.concurrency }),
      el("td", { title: fmtTime(w.started), text: fmtAge((taken - new Date(w.started).getTime()) / 1000) }),
      el("td", { "data-col": "seen", title: fmtTime(w.last_seen), text: fmtAge((taken - new Date(w.last_seen).getTime()) / 1000) + " ago" })));
    return [
      el("p", { class: "muted", text: "Running workers, from the worker registry. A worker that shuts down leaves at once; a killed one when its record's TTL passes (three heartbeat intervals: 15 s by default)." }),
      type ? el("p", {}, "Serving " + type + " · ", el("a", { href: "#/workers", text: "all workers" })) : null,
      (out.unserved_versions || []).length ? el("div", { class: "warn", id: "unserved-versions" },
        (out.unserved_versions || []).map((u) => el("p", { "data-unserved": u.type + "@" + u.version,
          text: "Payload version " + u.version + " of " + u.type + ": no live worker accepts it. " + fmtNum(u.count) +
            " hand-back(s) by " + u.refused_by.length + " worker(s), the last " +
            fmtAge((taken - new Date(u.last).getTime()) / 1000) + " ago. Start a worker whose handler accepts it; after the workers' grace its tasks are dead-lettered with reason version." }))) : null,
      table([{ label: "ID" }, { label: "Host" }, { label: "PID", num: 1 }, { label: "Version" }, { label: "Types and priorities" },
        { label: "Busy", num: 1 }, { label: "Up" }, { label: "Last heartbeat" }], rows, type ? "No live worker serves " + type + "." : "No live workers."),
      out.invalid ? el("p", { class: "muted", text: out.invalid + " record(s) in the registry break its rules and are not listed." }) : null,
    ];
  },
};

pages.scheduled = {
  title: "Scheduled tasks",
  async load(arg, q) {
    const out = await api("api/scheduled" + qs({ type: q.get("type") || "" }));
    const rows = out.tasks.map((t) => el("tr", { "data-task": t.id },
      el("td", {}, el("a", { href: "#/task/" + encodeURIComponent(t.id), text: t.id })),
      el("td", { text: t.type }), el("td", { text: t.priority }),
      timeCell(t.scheduled_for), timeCell(t.enqueued_at),
      el("td", {}, config.read_only ? null : el("button", { class: "danger", "data-action": "cancel",
        onclick: () => act("Cancel task " + t.id + "? It will never run.", "api/tasks/" + encodeURIComponent(t.id) + "/cancel") }, "Cancel"))));
    return [
      table([{ label: "Task" }, { label: "Type" }, { label: "Priority" }, { label: "Due" }, { label: "Enqueued" }, { label: "" }],
        rows, "No delayed task is waiting."),
      out.truncated ? el("p", { class: "muted", text: "Showing the first tasks due; more are waiting." }) : null,
    ];
  },
};

pages.task = {
  title: "Task",
  async load(arg) {
    const form = el("form", { class: "filters", onsubmit: (e) => {
      e.preventDefault();
      location.hash = "#/task/" + encodeURIComponent(form.elements.id.value.trim());
    } }, el("input", { name: "id", placeholder: "task ID", value: arg || "", size: 32 }), el("button", { class: "primary", text: "Look up" }));
    if (!arg) return [form, el("p", { class: "muted", text: "Task records exist while state tracking is on (WithStateTracking), for tasks that report progress, set a result or were enqueued with Awaited, and for delayed tasks still waiting." })];
    let rec;
    try {
      rec = await api("api/tasks/" + encodeURIComponent(arg));
    } catch (e) {
      if (e.status === 404) return [form, el("div", { class: "empty", id: "task-missing", text: "No record of task " + arg + "." })];
      throw e;
    }
    const f = (k, v) => v === undefined || v === "" || v === null ? null : [el("dt", { text: k }), el("dd", { "data-field": k }, v)];
    return [form, el("dl", { class: "fields", id: "task-record" },
      f("ID", rec.id), f("Type", rec.type), f("Priority", rec.priority), f("State", badge(rec.state)),
      f("Attempt", rec.attempt ? rec.attempt + (rec.max_attempts ? " of " + rec.max_attempts : "") : ""),
      f("Progress", rec.progress ? progressView(rec.progress) : null),
      f("Last error", rec.error ? el("span", { class: "err", text: rec.error }) : ""), f("Schedule", rec.schedule),
      f("Enqueued", fmtTime(rec.enqueued_at)), f("Due", fmtTime(rec.scheduled_for)), f("Started", fmtTime(rec.started_at)),
      f("Finished", fmtTime(rec.finished_at)), f("Next attempt", fmtTime(rec.next_attempt_at)), f("Updated", fmtTime(rec.updated_at)),
      f("Result", rec.result !== undefined ? el("pre", { text: JSON.stringify(rec.result, null, 2) }) : null)),
      rec.state === "scheduled" && !config.read_only ? el("p", {}, el("button", { class: "danger", "data-action": "cancel",
        onclick: () => act("Cancel task " + rec.id + "?", "api/tasks/" + encodeURIComponent(rec.id) + "/cancel") }, "Cancel task")) : null];
  },
};

// progressView shows a handler's progress (framework.ReportProgress): a
// bar when the total is known, the count and the message. The page
// refreshes while the task runs.
function progressView(p) {
  const done = Number(p.done) || 0, total = Number(p.total) || 0;
  const known = total > 0 && done <= total;
  return el("span", { id: "task-progress" },
    known ? el("progress", { max: total, value: done }) : null,
    el("span", { text: (known ? " " + fmtNum(done) + " of " + fmtNum(total) + " (" + Math.floor(100 * done / total) + "%)" : fmtNum(done)) +
      (p.message ? " · " + p.message : "") }));
}

const dlqFilter = { type: "", reason: "", contains: "" };
const dlqPages = [0]; // cursors of the pages shown so far; the last is the current one

pages.dlq = {
  title: "Dead letters",
  async load(arg) {
    if (arg) return dlqItem(arg);
    const ov = await api("api/overview");
    const after = dlqPages[dlqPages.length - 1];
    const list = await api("api/dlq" + qs({ ...dlqFilter, after: after || "", limit: config.default_page }));
    const setFilter = (name, value) => { dlqFilter[name] = value; dlqPages.length = 1; refresh(); };
    const sel = (name, values) => el("select", { name, onchange: (e) => setFilter(name, e.target.value) },
      el("option", { value: "", text: "all " + name + "s" }),
      values.map((v) => el("option", { value: v, selected: dlqFilter[name] === v, text: v })));
    const types = Object.keys(ov.dead).sort();
    const filterBody = { type: dlqFilter.type, reason: dlqFilter.reason, contains: dlqFilter.contains };
    const anyFilter = filterBody.type || filterBody.reason || filterBody.contains;
    const matching = anyFilter ? (filterBody.reason || filterBody.contains ? null : ov.dead[filterBody.type] || 0) : ov.dead_total;
    const what = (matching === null ? "every matching" : fmtNum(matching)) + " dead letter" + (matching === 1 ? "" : "s") +
      (filterBody.type ? " of type " + filterBody.type : "") + (filterBody.reason ? " with reason " + filterBody.reason : "") +
      (filterBody.contains ? " whose error contains \"" + filterBody.contains + "\"" : "");
    const contains = el("input", { name: "contains", placeholder: "error contains", value: dlqFilter.contains,
      onchange: (e) => setFilter("contains", e.target.value) });
    const rows = list.items.map((d) => el("tr", { "data-seq": d.seq, "data-task": d.task_id },
      el("td", {}, el("a", { href: "#/dlq/" + d.seq, text: d.seq })), timeCell(d.time),
      el("td", {}, el("a", { href: "#/task/" + encodeURIComponent(d.task_id), text: d.task_id })),
      el("td", { "data-col": "type", text: d.type }), el("td", { text: d.priority }), el("td", {}, badge(d.reason)),
      el("td", { class: "num", text: d.deliveries }), el("td", { class: "err", text: d.last_error || "" }),
      el("td", {}, config.read_only ? null : el("button", { "data-action": "replay",
        onclick: () => act(null, "api/dlq/" + d.seq + "/replay") }, "Replay"))));
    return [
      el("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, sel("type", types), sel("reason", config.dead_reasons), contains,
        config.read_only || !list.items.length ? null : [
          el("button", { type: "button", "data-action": "replay-all",
            onclick: () => act("Replay " + what + "? Each is enqueued again and removed from the dead letters.", "api/dlq/replay", { ...filterBody, all: !anyFilter }) }, "Replay all"),
          el("button", { type: "button", class: "danger", "data-action": "purge",
            onclick: () => act("Purge " + what + "? They are deleted for good.", "api/dlq/purge", { ...filterBody, all: !anyFilter }) }, "Purge"),
        ]),
      table([{ label: "Seq" }, { label: "Died" }, { label: "Task" }, { label: "Type" }, { label: "Priority" }, { label: "Reason" },
        { label: "Attempts", num: 1 }, { label: "Last error" }, { label: "" }], rows, "No dead letters."),
      el("div", { class: "toolbar" },
        dlqPages.length > 1 ? el("button", { type: "button", "data-action": "first-page", onclick: () => { dlqPages.length = 1; refresh(); } }, "First page") : null,
        list.items.length >= config.default_page && list.next ? el("button", { type: "button", "data-action": "next-page",
          onclick: () => { dlqPages.push(list.next); refresh(); } }, "Next page") : null),
    ];
  },
};

async function dlqItem(seq) {
  let d;
  try {
    d = await api("api/dlq/" + encodeURIComponent(seq));
  } catch (e) {
    if (e.status === 404) return [el("div", { class: "empty", id: "dlq-missing", text: "Dead letter " + seq + " is gone (replayed or purged)." }), el("p", {}, el("a", { href: "#/dlq", text: "Back to dead letters" }))];
    throw e;
  }
  const f = (k, v) => v === undefined || v === "" || v === null ? null : [el("dt", { text: k }), el("dd", { "data-field": k }, v)];
  return [
    el("dl", { class: "fields", id: "dlq-record" },
      f("Sequence", d.seq), f("Task", el("a", { href: "#/task/" + encodeURIComponent(d.task_id), text: d.task_id })),
      f("Type", d.type), f("Priority", d.priority), f("Reason", badge(d.reason)), f("Attempts", d.deliveries),
      f("Last error", d.last_error ? el("span", { class: "err", text: d.last_error + (d.last_error_attempt ? " (attempt " + d.last_error_attempt + ")" : "") }) : ""),
      f("First failure", fmtTime(d.first_failure)), f("Last failure", fmtTime(d.last_failure)), f("Died", fmtTime(d.time)),
      f("Times dead", d.dead_count), f("Routed by", d.routed_by), f("Original", d.original_subject + " #" + d.original_seq)),
    config.read_only ? null : el("p", {}, el("button", { class: "primary", "data-action": "replay",
      onclick: async () => { if (await act(null, "api/dlq/" + d.seq + "/replay")) location.hash = "#/dlq"; } }, "Replay")),
    el("h2", { text: "Payload (" + d.payload_bytes + " bytes)" }),
    el("pre", { id: "dlq-payload", text: d.payload_omitted ? "(omitted: too large to keep)" : d.payload !== undefined ? d.payload : "(binary, base64) " + (d.payload_base64 || "") }),
    el("h2", { text: "Headers" }),
    table([{ label: "Header" }, { label: "Value" }], Object.keys(d.headers || {}).sort().map((k) => el("tr", {}, el("td", { text: k }), el("td", { text: d.headers[k] })))),
  ];
}

pages.cron = {
  title: "Cron schedules",
  async load() {
    const out = await api("api/cron");
    return table([{ label: "Name" }, { label: "Spec" }, { label: "Zone" }, { label: "Type" }, { label: "Priority" }, { label: "Next fire" }, { label: "Payload" }],
      out.schedules.map((s) => el("tr", { "data-schedule": s.name },
        el("td", { text: s.name }), el("td", {}, el("code", { text: s.spec })), el("td", { text: s.time_zone || "UTC" }),
        el("td", { text: s.type }), el("td", { text: s.priority }), timeCell(s.next),
        el("td", {}, el("code", { text: (s.payload || "").slice(0, 120) })))),
      "No repeating schedule.");
  },
};

pages.breakers = {
  title: "Circuit breakers",
  async load() {
    const out = await api("api/breakers");
    return [
      el("p", { class: "muted", text: "The latest state change any worker reported per dependency. An open breaker pauses the consumers of the task types that declared the dependency." }),
      table([{ label: "Dependency" }, { label: "State" }, { label: "Since" }, { label: "Until" }, { label: "Failures", num: 1 }, { label: "Task types" }, { label: "Paused consumers" }],
        out.breakers.map((b) => el("tr", { "data-dependency": b.dependency },
          el("td", { text: b.dependency }), el("td", {}, badge(b.state), b.probing ? el("span", { class: "muted", text: " probing" }) : null),
          timeCell(b.since), timeCell(b.until), el("td", { class: "num", text: b.failures || "" }),
          el("td", { text: (b.task_types || []).join(", ") }), el("td", { text: (b.consumers || []).join(", ") }))),
        "No breaker has changed state: no worker declared a dependency, or none has failed."),
    ];
  },
};

pages.keys = {
  title: "Ordering, limits, uniqueness",
  async load() {
    const [ord, lim, uni, ten] = await Promise.all([api("api/ordering"), api("api/limits"), api("api/unique"), api("api/tenants")]);
    const resolve = (b, how) => el("button", { type: "button", "data-action": "resolve-" + how,
      onclick: () => act((how === "retry" ? "Run task " + b.id + " once more?" : "Dead-letter task " + b.id + " and let key " + b.key + " move on?"),
        "api/ordering/" + encodeURIComponent(b.type) + "/" + encodeURIComponent(b.id) + "/resolve", { resolution: how }) }, how === "retry" ? "Retry" : "Skip");
    return [
      el("h2", { text: "Blocked ordering keys" }),
      el("p", { class: "muted", text: "Ordered tasks that failed for good on a type with BlockOnDeadLetter: their key (and their partition) waits until the task is retried or skipped." }),
      table([{ label: "Type" }, { label: "Key" }, { label: "Task" }, { label: "Since" }, { label: "Attempts", num: 1 }, { label: "Error" }, { label: "" }],
        ord.blocked.map((b) => el("tr", { "data-blocked": b.id },
          el("td", { text: b.type }), el("td", { text: b.key }),
          el("td", {}, el("a", { href: "#/task/" + encodeURIComponent(b.id), text: b.id })), timeCell(b.since),
          el("td", { class: "num", text: b.attempts }), el("td", { class: "err", text: b.error }),
          el("td", {}, b.resolution ? el("span", { class: "muted", text: "resolved: " + b.resolution })
            : config.read_only ? null : [resolve(b, "retry"), " ", resolve(b, "skip")]))),
        "No ordering key is blocked."),
      el("h2", { text: "Ordering partitions" }),
      table([{ label: "Type" }, { label: "Partition" }, { label: "Head task" }, { label: "Key" }, { label: "State" }, { label: "Waiting", num: 1 }, { label: "Paused until" }],
        ord.partitions.map((p) => el("tr", { "data-partition": p.type + "/" + p.partition },
          el("td", { text: p.type }), el("td", { text: p.partition + "/" + p.partitions }),
          el("td", {}, p.head_id ? el("a", { href: "#/task/" + encodeURIComponent(p.head_id), text: p.head_id }) : ""),
          el("td", { text: p.head_key || "" }), el("td", {}, badge(!p.head_id ? "idle" : p.retrying ? "retrying" : "running")),
          el("td", { class: "num", text: fmtNum(p.pending) }), el("td", { text: p.paused_until || "" }))),
        "No ordered task type: no worker registered a type with ordering."),
      el("h2", { text: "Ordering lanes" }),
      el("p", { class: "muted", text: "Lanes of types with Ordering{Lanes}: the worker each lane is pinned to, its tasks running and queued behind their key (from its last registry record), tasks delivered and waiting." }),
      table([{ label: "Type" }, { label: "Lane" }, { label: "Owner" }, { label: "Since" }, { label: "Running", num: 1 }, { label: "Queued", num: 1 }, { label: "Keys", num: 1 }, { label: "Delivered", num: 1 }, { label: "Waiting", num: 1 }, { label: "State" }],
        ord.lanes.map((l) => el("tr", { "data-lane": l.type + "/" + l.partition + "/" + l.lane },
          el("td", { text: l.type }), el("td", { text: (l.partition ? "p" + l.partition + " " : "") + l.lane + "/" + l.lanes }),
          el("td", { text: l.owner || "" }), l.owner ? timeCell(l.pinned_since) : el("td", {}),
          el("td", { class: "num", text: fmtNum(l.running) }), el("td", { class: "num", text: fmtNum(l.queued) }),
          el("td", { class: "num", text: fmtNum(l.keys) }), el("td", { class: "num", text: fmtNum(l.delivered) }),
          el("td", { class: "num", text: fmtNum(l.waiting) }),
          el("td", {}, badge(l.paused ? "paused" : !l.owner ? "idle" : l.open ? "running" : "waiting")))),
        "No lanes: no worker registered a type with Ordering{Lanes}."),
      el("h2", { text: "Rate limits" }),
      table([{ label: "Limit" }, { label: "Per" }, { label: "Burst", num: 1 }, { label: "Last second", num: 1 }, { label: "Limit per second", num: 1 }, { label: "Throttled until" }],
        lim.limits.map((l) => el("tr", { "data-limit": l.name },
          el("td", { text: l.name }), el("td", { text: l.limit + " / " + l.interval_seconds + "s" }), el("td", { class: "num", text: l.burst }),
          el("td", { class: "num" + (l.last_second > l.limit_per_second ? " err" : ""), text: fmtNum(l.last_second) }),
          el("td", { class: "num", text: Number(l.limit_per_second.toPrecision(4)) }),
          l.throttled ? timeCell(l.throttled_until) : el("td", {}))),
        "No rate limit used yet."),
      el("h2", { text: "Task keys" }),
      el("p", { class: "muted", text: "Each task key (tenant) flow control knows, busiest first: tasks running under keylimit or in a lane, tasks queued behind their key in a lane, tasks waiting for their fair share, its override, its per-key rate limit, its debounced burst." }),
      table([{ label: "Type" }, { label: "Key" }, { label: "Running", num: 1 }, { label: "Queued", num: 1 }, { label: "Staged", num: 1 }, { label: "Override", num: 1 }, { label: "Rate last second", num: 1 }, { label: "Throttled" }, { label: "Debounced" }],
        ten.keys.map((k) => el("tr", { "data-key": k.type + "/" + k.key },
          el("td", { text: k.type }), el("td", { text: k.key }), el("td", { class: "num", text: fmtNum(k.running) }),
          el("td", { class: "num", text: k.queued ? fmtNum(k.queued) : "" }),
          el("td", { class: "num", text: k.staged ? fmtNum(k.staged) : "" }),
          el("td", { class: "num", text: k.limit || "" }),
          el("td", { class: "num", text: k.rate_per_second ? fmtNum(k.rate_last_second || 0) + " of " + Number(k.rate_per_second.toPrecision(4)) + "/s" : "" }),
          el("td", {}, k.throttled ? badge("throttled") : ""),
          el("td", { text: k.debounced_since ? (k.debounced_enqueues + " enqueues since " + k.debounced_since) : "" }))),
        "No task key in use."),
      el("h2", { text: "Uniqueness reservations" }),
      table([{ label: "Type" }, { label: "Key hash" }, { label: "Task" }, { label: "Until" }, { label: "Released" }],
        uni.reservations.map((r) => el("tr", { "data-reservation": r.id },
          el("td", { text: r.type }), el("td", {}, el("code", { text: r.hash })),
          el("td", {}, el("a", { href: "#/task/" + encodeURIComponent(r.id), text: r.id })), timeCell(r.until),
          el("td", { text: r.until_done ? "when the task succeeds" : "at the end of the period" }))),
        "No uniqueness reservation."),
    ];
  },
};

const wfFilter = { workflow: "", status: "" };

pages.workflows = {
  title: "Workflow runs",
  async load(arg) {
    if (arg) return workflowRun(arg);
    const out = await api("api/workflows" + qs(wfFilter));
    const sel = (name, values) => el("select", { name, onchange: (e) => { wfFilter[name] = e.target.value; refresh(); } },
      el("option", { value: "", text: "all " + (name === "status" ? "statuses" : "workflows") }),
      values.map((v) => el("option", { value: v, selected: wfFilter[name] === v, text: v })));
    const names = out.workflows.includes(wfFilter.workflow) || !wfFilter.workflow ? out.workflows : [...out.workflows, wfFilter.workflow];
    return [
      el("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, sel("workflow", names), sel("status", config.workflow_status)),
      table([{ label: "Run" }, { label: "Workflow" }, { label: "Status" }, { label: "Steps" }, { label: "Started" }, { label: "Updated" }, { label: "Error" }],
        out.runs.map((r) => el("tr", { "data-run": r.id },
          el("td", {}, el("a", { href: "#/workflows/" + encodeURIComponent(r.id), text: r.id })), el("td", { text: r.workflow }),
          el("td", {}, badge(r.status)),
          el("td", {}, Object.keys(r.states).sort().map((s) => [badge(s), " " + r.states[s] + " "])),
          timeCell(r.created_at), timeCell(r.updated_at), el("td", { class: "err", text: r.error || "" }))),
        "No workflow runs."),
    ];
  },
};

// dag draws the steps of a run in columns by depth, edges from each step to
// the steps that wait for it.
function dag(steps) {
  const byName = new Map(steps.map((s) => [s.name, s]));
  const depth = new Map();
  const depthOf = (s, seen) => {
    if (depth.has(s.name)) return depth.get(s.name);
    if (seen.has(s.name)) return 0;
    seen.add(s.name);
    const d = (s.after || []).reduce((m, a) => byName.has(a) ? Math.max(m, depthOf(byName.get(a), seen) + 1) : m, 0);
    depth.set(s.name, d);
    return d;
  };
  steps.forEach((s) => depthOf(s, new Set()));
  const cols = [];
  for (const s of steps) (cols[depth.get(s.name)] ||= []).push(s);
  const NW = 170, NH = 48, GX = 70, GY = 18, P = 12;
  const pos = new Map();
  cols.forEach((col, c) => col.forEach((s, r) => pos.set(s.name, { x: P + c * (NW + GX), y: P + r * (NH + GY) })));
  const W = P * 2 + cols.length * NW + Math.max(0, cols.length - 1) * GX;
  const H = P * 2 + Math.max(1, ...cols.map((c) => c.length)) * (NH + GY) - GY;
  const svg = el("svg:svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: "dag" },
    el("svg:defs", {}, el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
      el("svg:path", { d: "M0 0 L10 5 L0 10 z", fill: "#98a2b3" }))));
  for (const s of steps) for (const a of s.after || []) {
    if (!pos.has(a)) continue;
    const p = pos.get(a), q = pos.get(s.name);
    const x1 = p.x + NW, y1 = p.y + NH / 2, x2 = q.x, y2 = q.y + NH / 2, mx = (x1 + x2) / 2;
    svg.append(el("svg:path", { class: "edge", d: `M${x1} ${y1} C${mx} ${y1} ${mx} ${y2} ${x2} ${y2}`, "marker-end": "url(#arrow)", "data-edge": a + "->" + s.name }));
  }
  for (const s of steps) {
    const p = pos.get(s.name);
    svg.append(el("svg:g", { class: "node " + s.state, transform: `translate(${p.x},${p.y})`, "data-step": s.name, "data-state": s.state },
      el("svg:rect", { width: NW, height: NH }),
      el("svg:text", { x: 10, y: 19, "font-weight": 600, text: s.name.length > 22 ? s.name.slice(0, 21) + "…" : s.name }),
      el("svg:text", { x: 10, y: 37, fill: "#414a5c", text: s.state + (s.state === "sleeping" || s.state === "waiting" ? " · " + (s.state === "sleeping" ? "wake " + fmtTime(s.wake_at) : s.event_key).slice(0, 20) : s.attempts > 1 ? " · " + s.attempts + " attempts" : "") })));
  }
  return el("div", { class: "dag" }, svg);
}

// stepWaits says what a sleeping step (workflow.Sleep) or a waiting step
// (workflow.WaitEvent) waits for: its wake time, or its event key and the
// deadline of its timeout; and how far a fan-out (workflow.ForEach) got.
function stepWaits(s) {
  if (s.items) return "items " + (s.items_done || 0) + "/" + s.items + (s.items_failed ? " (" + s.items_failed + " failed)" : "");
  if (s.state === "sleeping") return "wake at " + fmtTime(s.wake_at);
  if (s.state === "waiting") return "event " + s.event_key + (s.deadline ? ", until " + fmtTime(s.deadline) : "");
  if (s.timed_out) return "timed out without event " + s.event_key;
  return "";
}

async function workflowRun(id) {
  let r;
  try {
    r = await api("api/workflows/" + encodeURIComponent(id));
  } catch (e) {
    if (e.status === 404) return el("div", { class: "empty", text: "No run " + id + " (it may have expired)." });
    throw e;
  }
  return [
    el("dl", { class: "fields", id: "run-record" },
      el("dt", { text: "Run" }), el("dd", { text: r.id }), el("dt", { text: "Workflow" }), el("dd", { text: r.workflow }),
      el("dt", { text: "Status" }), el("dd", { "data-field": "status" }, badge(r.status)),
      el("dt", { text: "Started" }), el("dd", { text: fmtTime(r.created_at) }),
      el("dt", { text: "Updated" }), el("dd", { text: fmtTime(r.updated_at) }),
      r.error ? [el("dt", { text: "Error" }), el("dd", { class: "err", text: r.error })] : null),
    el("h2", { text: "Steps" }),
    dag(r.steps || []),
    el("h2", {}),
    table([{ label: "Step" }, { label: "After" }, { label: "State" }, { label: "Attempts", num: 1 }, { label: "Waits for" }, { label: "Started" }, { label: "Ended" }, { label: "Error / output" }],
      (r.steps || []).map((s) => el("tr", { "data-step": s.name },
        el("td", { text: s.name }), el("td", { text: (s.after || []).join(", ") }), el("td", {}, badge(s.state)),
        el("td", { class: "num", text: s.attempts || "" }), el("td", { "data-field": "waits", text: stepWaits(s) }), timeCell(s.started_at), timeCell(s.ended_at),
        el("td", {}, s.error ? el("span", { class: "err", text: s.error }) : el("code", { text: s.output !== undefined ? JSON.stringify(s.output).slice(0, 120) : "" }))))),
  ];
}

// ---- routing -------------------------------------------------------------

function route() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map((p) => {
    try { return decodeURIComponent(p); } catch { return p; } // a malformed link: show it as typed
  });
  const name = parts[0] && pages[parts[0]] ? parts[0] : "overview";
  return { name, arg: parts.slice(1).join("/"), query: new URLSearchParams(query || "") };
}

async function refresh() {
  const { name, arg, query } = route();
  const page = pages[name];
  const seq = ++renderSeq;
  try {
    const content = await page.load(arg, query);
    if (seq !== renderSeq) return; // a newer render started
    const active = document.activeElement && document.activeElement.name;
    main.replaceChildren(el("h1", { text: page.title + (arg ? " " + arg : "") }),
      ...[content].flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
    if (active) { const f = main.querySelector(`[name="${active}"]`); if (f) f.focus(); }
    main.dataset.page = name;
    main.dataset.loaded = String(seq);
    banner("");
  } catch (e) {
    if (seq !== renderSeq) return;
    banner("Could not load: " + e.message);
    main.dataset.page = name;
    main.dataset.error = e.message;
  }
}

function schedule() {
  clearInterval(timer);
  timer = setInterval(() => {
    const typing = document.activeElement && document.activeElement.tagName === "INPUT";
    if (document.getElementById("modal").hidden && document.visibilityState !== "hidden" && !typing) refresh();
  }, config.refresh_ms);
}

function navigate() {
  const { name } = route();
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === name);
  main.replaceChildren(el("p", { class: "muted", text: "Loading…" }));
  refresh();
  schedule();
}

(async function start() {
  try {
    config = await api("api/config");
  } catch (e) {
    banner("Could not load the dashboard configuration: " + e.message);
  }
  document.getElementById("title").textContent = config.title || "jetflow";
  document.title = config.title || "jetflow";
  if (config.read_only) document.getElementById("mode").textContent = "read-only";
  window.addEventListener("hashchange", navigate);
  navigate();
})();
