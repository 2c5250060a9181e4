package streams

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ensureStream creates want, or updates the settings of the existing stream
// that [Ensure] manages. With apply false it changes nothing and records
// in rep what it would do.
func ensureStream(ctx context.Context, js jetstream.JetStream, n Names, want jetstream.StreamConfig, rep *Report, apply bool) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if !apply {
			rep.Created = append(rep.Created, want.Name)
			return nil
		}
		_, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another process created it between our lookup and create.
			s, err = js.Stream(ctx, want.Name)
		} else if err != nil {
			return fmt.Errorf("streams: create %s: %w", want.Name, err)
		} else {
			rep.Created = append(rep.Created, want.Name)
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("streams: look up %s: %w", want.Name, err)
	}
	next, d := diffStream(s.CachedInfo().Config, want)
	for _, x := range d.drift {
		x.Fix = n.fix(x.Resource, x.Field)
		rep.Drift = append(rep.Drift, x)
	}
	for _, x := range d.weaker {
		x.Fix = n.fix(x.Resource, x.Field)
		rep.Weaker = append(rep.Weaker, x)
	}
	if len(d.changes) == 0 {
		rep.Unchanged = append(rep.Unchanged, want.Name)
		return nil
	}
	if apply {
		if _, err := js.UpdateStream(ctx, next); err != nil {
			return fmt.Errorf("streams: update %s: %w", want.Name, err)
		}
	}
	rep.Updated = append(rep.Updated, want.Name)
	rep.Changed = append(rep.Changed, d.changes...)
	return nil
}

// streamDiff is how an existing stream differs from the wanted one:
// settings [Ensure] changes in place, settings the server cannot change
// (drift), and settings less strict than wanted that the server cannot
// tighten (weaker).
type streamDiff struct {
	changes, drift, weaker []Drift
}

// diffStream compares an existing stream's configuration with the wanted
// one, field by field, and returns the configuration Ensure updates it
// to: have with the settings Ensure manages set as in want. Fields Ensure
// does not manage (limits an operator added) keep their values.
func diffStream(have, want jetstream.StreamConfig) (jetstream.StreamConfig, streamDiff) {
	var d streamDiff
	next := have
	one := func(field string, w, h any) Drift {
		return Drift{Resource: want.Name, Field: field, Want: fmt.Sprint(w), Have: fmt.Sprint(h)}
	}
	set := func(cond bool, field string, w, h any, apply func()) {
		if cond {
			apply()
			d.changes = append(d.changes, one(field, w, h))
		}
	}
	if have.Retention != want.Retention {
		d.drift = append(d.drift, one("Retention", want.Retention, have.Retention))
	}
	if have.Storage != want.Storage {
		d.drift = append(d.drift, one("Storage", want.Storage, have.Storage))
	}
	set(!sameSet(have.Subjects, want.Subjects), "Subjects", subjectList(want.Subjects), subjectList(have.Subjects),
		func() { next.Subjects = want.Subjects })
	set(have.Replicas != want.Replicas, "Replicas", want.Replicas, have.Replicas, func() { next.Replicas = want.Replicas })
	set(have.Duplicates != want.Duplicates && want.Duplicates > 0, "Duplicates", want.Duplicates, have.Duplicates,
		func() { next.Duplicates = want.Duplicates })
	set(have.MaxAge != want.MaxAge, "MaxAge", want.MaxAge, have.MaxAge, func() { next.MaxAge = want.MaxAge })
	set(want.MaxBytes > 0 && have.MaxBytes != want.MaxBytes, "MaxBytes", want.MaxBytes, have.MaxBytes,
		func() { next.MaxBytes = want.MaxBytes })
	set(have.Discard != want.Discard, "Discard", want.Discard, have.Discard, func() { next.Discard = want.Discard })
	set(want.MaxMsgsPerSubject != 0 && have.MaxMsgsPerSubject != want.MaxMsgsPerSubject, "MaxMsgsPerSubject",
		want.MaxMsgsPerSubject, have.MaxMsgsPerSubject, func() { next.MaxMsgsPerSubject = want.MaxMsgsPerSubject })
	set(want.AllowMsgSchedules && !have.AllowMsgSchedules, "AllowMsgSchedules", true, false, func() { next.AllowMsgSchedules = true })
	if !want.AllowMsgSchedules {
		// (The server forces rollups and purges on with schedules.)
		set(!want.AllowRollup && have.AllowRollup, "AllowRollup", false, true, func() { next.AllowRollup = false })
		set(want.DenyPurge && !have.DenyPurge, "DenyPurge", true, false, func() { next.DenyPurge = true })
		if !want.DenyPurge && have.DenyPurge {
			d.drift = append(d.drift, one("DenyPurge", false, true)) // the server cannot cancel it
		}
	}
	set(!sameSources(have.Sources, want.Sources), "Sources", sourceList(want.Sources), sourceList(have.Sources),
		func() { next.Sources = want.Sources })
	// Message TTL and atomic publish are on exactly where jetflow wants
	// them. The server turns atomic publish off in place but never message
	// TTL (it answers "message TTL status can not be disabled"). A stream
	// that has it works as it did before the upgrade, only without the
	// protection: reported as weaker, not as drift, so that an upgrade does
	// not stop a deployment (decision 040 says how to recreate it).
	set(want.AllowMsgTTL && !have.AllowMsgTTL, "AllowMsgTTL", true, false, func() { next.AllowMsgTTL = true })
	if !want.AllowMsgTTL && have.AllowMsgTTL {
		d.weaker = append(d.weaker, one("AllowMsgTTL",
			"false (the server cannot turn it off: drain and recreate the stream, decision 040)", true))
	}
	set(want.AllowAtomicPublish != have.AllowAtomicPublish, "AllowAtomicPublish", want.AllowAtomicPublish, have.AllowAtomicPublish,
		func() { next.AllowAtomicPublish = want.AllowAtomicPublish })
	set(want.AllowDirect && !have.AllowDirect, "AllowDirect", true, false, func() { next.AllowDirect = true })
	cloned := false // next.Metadata is a copy of have's, not have's own map
	for _, key := range []string{metaPartitions, metaOrderedPartitions, metaPartitionBy} {
		if w, h := want.Metadata[key], have.Metadata[key]; w != h && w != "" {
			set(true, "Metadata."+key, w, h, func() {
				if !cloned {
					next.Metadata, cloned = maps.Clone(have.Metadata), true
				}
				if next.Metadata == nil {
					next.Metadata = make(map[string]string, 2)
				}
				next.Metadata[key] = w
			})
		}
	}
	if want.Placement != nil && (have.Placement == nil || !slices.Equal(have.Placement.Tags, want.Placement.Tags)) {
		// The server moves the stream to the servers of its new tags.
		set(true, "Placement", fmt.Sprint(want.Placement.Tags), placementTags(have.Placement), func() { next.Placement = want.Placement })
	}
	set(have.Description != want.Description, "Description", fmt.Sprintf("%q", want.Description), fmt.Sprintf("%q", have.Description),
		func() { next.Description = want.Description })
	return next, d
}

// subjectList formats subjects for a [Drift], sorted.
func subjectList(subjects []string) string {
	if len(subjects) == 0 {
		return "none"
	}
	s := slices.Clone(subjects)
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// sourceList formats a stream's sources for a [Drift].
func sourceList(sources []*jetstream.StreamSource) string {
	if len(sources) == 0 {
		return "none"
	}
	out := make([]string, 0, len(sources))
	for _, s := range sources {
		one := s.Name
		if s.Consumer != nil {
			one += " through consumer " + s.Consumer.Name
		}
		for _, t := range s.SubjectTransforms {
			one += " (" + t.Source + " to " + t.Destination + ")"
		}
		out = append(out, one)
	}
	return strings.Join(out, ", ")
}

// placementTags formats the tags of a placement for a [Drift].
func placementTags(p *jetstream.Placement) string {
	if p == nil {
		return "[]"
	}
	return fmt.Sprint(p.Tags)
}
