// Package doccheck holds only a test: it keeps the names the docs use true.
// It reads docs/*.md (decision notes aside, which record history) and the
// doc comments of every package of the module, and fails when a
// `pkg.Name` or `pkg.Type.Member` of one of the module's packages in
// backticks, or a [pkg.Name] doc link, names nothing exported there, or when
// a JETFLOW_* stream or bucket named in the docs is not one that
// streams.Names returns.
package doccheck
