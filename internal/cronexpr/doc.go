// Package cronexpr parses the schedule expressions accepted by NATS message
// schedules (nats-server 2.14+) and computes their fire times on the client,
// with the same rules the server applies: [Parse] validates an expression
// and normalises it for the Nats-Schedule header, [Expr.Next] returns the
// next fire time as the server computes it, and [Expr.Prev] the previous
// one (used to name the tick a fired task belongs to).
//
// # Forms
//
// Accepted forms:
//
//   - six fields with seconds: "sec min hour day-of-month month day-of-week",
//     for example "0 30 9 * * mon-fri";
//   - the common five-field form without seconds, which is normalised by
//     prefixing "0 " (fire at second 0);
//   - "@every <duration>" with a whole number of seconds, at least 1 s;
//   - the descriptors @yearly (@annually), @monthly, @weekly, @daily
//     (@midnight) and @hourly.
//
// # Fields
//
// A field is a comma-separated list of "*", "?", a value, a range "a-b", each
// optionally followed by a step "/n"; "a/n" means "a-max/n". Months and days
// of the week accept three-letter English names (jan, mon); days of the week
// run from 0 (Sunday) to 6. As in the server (and in classic cron), when both
// day fields are restricted a day matches if either matches; when one of them
// is "*" (or "?") only the other one restricts.
package cronexpr
