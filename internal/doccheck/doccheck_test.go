package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/streams"
)

// root is the module's directory, two levels up from this package.
const root = "../.."

// packages maps the names docs use for the module's packages to their
// directories.
var packages = map[string]string{
	"framework":   "framework",
	"streams":     "streams",
	"workflow":    "workflow",
	"ratelimit":   "ratelimit",
	"breaker":     "breaker",
	"effects":     "effects",
	"dlq":         "dlq",
	"inspect":     "inspect",
	"health":      "health",
	"handlers":    "handlers",
	"schedule":    "schedule",
	"jetflowtest": "jetflowtest",
	"testutil":    "testutil",
	"access":      "access",
	"jetflowprom": "contrib/prometheus",
	"jetflowotel": "contrib/otel",
}

// exports is what a package exports: its top-level names, and for each
// type its methods and (for a struct) its fields.
type exports struct {
	names   map[string]bool
	members map[string]map[string]bool
}

// has reports whether the package exports name (and name has member), or,
// without member, whether name is a method of one of its types: docs say
// schedule.List for the List method of a schedule.Manager.
func (e exports) has(name, member string) bool {
	if member != "" {
		return e.names[name] && e.members[name][member]
	}
	if e.names[name] {
		return true
	}
	for typ, ms := range e.members {
		if e.names[typ] && ms[name] && isExported(typ) {
			return true
		}
	}
	return false
}

func isExported(name string) bool { return name != "" && name[0] >= 'A' && name[0] <= 'Z' }

// load parses the non-test Go files of dir.
func load(t *testing.T, dir string) (exports, []*ast.File) {
	t.Helper()
	e := exports{names: map[string]bool{}, members: map[string]map[string]bool{}}
	member := func(typ, name string) {
		if e.members[typ] == nil {
			e.members[typ] = map[string]bool{}
		}
		e.members[typ][name] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	fset := token.NewFileSet()
	for _, ent := range entries {
		name := ent.Name()
		if ent.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					e.names[d.Name.Name] = true
					continue
				}
				typ := d.Recv.List[0].Type
				for {
					switch x := typ.(type) {
					case *ast.StarExpr:
						typ = x.X
						continue
					case *ast.IndexExpr:
						typ = x.X
						continue
					case *ast.IndexListExpr:
						typ = x.X
						continue
					}
					break
				}
				if id, ok := typ.(*ast.Ident); ok {
					member(id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							e.names[n.Name] = true
						}
					case *ast.TypeSpec:
						e.names[s.Name.Name] = true
						var fields *ast.FieldList
						switch x := s.Type.(type) {
						case *ast.StructType:
							fields = x.Fields
						case *ast.InterfaceType:
							fields = x.Methods
						}
						if fields == nil {
							continue
						}
						for _, f := range fields.List {
							for _, n := range f.Names {
								member(s.Name.Name, n.Name)
							}
							if len(f.Names) == 0 { // embedded
								typ := f.Type
								if st, ok := typ.(*ast.StarExpr); ok {
									typ = st.X
								}
								switch x := typ.(type) {
								case *ast.Ident:
									member(s.Name.Name, x.Name)
								case *ast.SelectorExpr:
									member(s.Name.Name, x.Sel.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	return e, files
}

// embeddedFrom adds to each type the members of the types of its own
// package it embeds, so that a promoted field or method resolves.
func (e exports) promote() {
	for range 3 { // embedding depth
		for typ, ms := range e.members {
			for m := range ms {
				for inner := range e.members[m] {
					e.members[typ][inner] = true
				}
			}
		}
	}
}

func loadAll(t *testing.T) (map[string]exports, map[string][]*ast.File) {
	t.Helper()
	all := make(map[string]exports, len(packages))
	files := make(map[string][]*ast.File, len(packages))
	for name, dir := range packages {
		e, fs := load(t, filepath.Join(root, dir))
		e.promote()
		all[name], files[name] = e, fs
	}
	return all, files
}

// ref matches pkg.Name or pkg.Type.Member; the package name must not
// follow a letter, digit, '.', '/' or '-' (a path or a longer name).
var ref = regexp.MustCompile(`(?:^|[^\w./-])([a-z]+)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)

// spans returns the backtick spans of a markdown text, fenced code
// included.
var span = regexp.MustCompile("`[^`\n]+`|(?s)```.*?```")

func TestDocsNameWhatExists(t *testing.T) {
	all, _ := loadAll(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs found: %v", err)
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range span.FindAllString(string(b), -1) {
			for _, ix := range ref.FindAllStringSubmatchIndex(s, -1) {
				if strings.HasPrefix(s[ix[1]:], "…") {
					continue // a family of names: dlq.Header…
				}
				pkg, name, member := s[ix[2]:ix[3]], s[ix[4]:ix[5]], ""
				if ix[6] >= 0 {
					member = s[ix[6]:ix[7]]
				}
				e, ok := all[pkg]
				if ok && !e.has(name, member) {
					t.Errorf("%s: %s names nothing exported by package %s", filepath.Base(doc), strings.TrimLeft(s[ix[0]:ix[1]], " ([{`"), pkg)
				}
			}
		}
	}
}

// docLink matches a doc link [pkg.Name] or [pkg.Type.Member].
var docLink = regexp.MustCompile(`\[([a-z]+)\.([A-Z]\w*)(?:\.([A-Z]\w*))?\]`)

// TestDocLinksNameWhatExists checks the doc links of the packages' doc
// comments, and the names in their string literals (a bucket's
// description, an error's advice).
func TestDocLinksNameWhatExists(t *testing.T) {
	all, files := loadAll(t)
	for pkg, fs := range files {
		for _, f := range fs {
			for _, cg := range f.Comments {
				for _, m := range docLink.FindAllStringSubmatch(cg.Text(), -1) {
					e, ok := all[m[1]]
					if ok && !e.has(m[2], m[3]) {
						t.Errorf("package %s: doc link %s names nothing exported by package %s", pkg, m[0], m[1])
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				for _, m := range ref.FindAllStringSubmatch(lit.Value, -1) {
					e, ok := all[m[1]]
					if ok && !e.has(m[2], m[3]) {
						t.Errorf("package %s: string %s names %s.%s, which package %s does not export", pkg, lit.Value, m[1], m[2], m[1])
					}
				}
				return true
			})
		}
	}
}

// resource matches a stream or bucket name of the default prefix.
var resource = regexp.MustCompile(`\bJETFLOW_[A-Z_]*[A-Z]\b`)

func TestDocsNameStreamsAndBucketsThatExist(t *testing.T) {
	names := streams.MustNames("")
	known := map[string]bool{}
	v := reflect.ValueOf(names)
	for i := range v.NumMethod() {
		m := v.Method(i)
		if m.Type().NumIn() != 0 || m.Type().NumOut() != 1 || m.Type().Out(0).Kind() != reflect.String {
			continue
		}
		if s := m.Call(nil)[0].String(); strings.HasPrefix(s, "JETFLOW_") {
			known[s] = true
		}
	}
	// The task streams of the partitions, and their pattern
	// ("JETFLOW_TASKS_P<k>").
	for k := 1; k < streams.MaxPartitions; k++ {
		known[names.Partition(k).TaskStream()] = true
	}
	known[names.TaskStream()+"_P"] = true
	if !known[names.TaskStream()] || !known[names.EffectsBucket()] {
		t.Fatalf("names of streams.Names not found: %v", known)
	}
	// Environment variables the code reads share the prefix.
	env := regexp.MustCompile(`Getenv\("(JETFLOW_\w+)"\)`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		for _, m := range env.FindAllStringSubmatch(string(b), -1) {
			known[m[1]] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resource.FindAllString(string(b), -1) {
			if !known[r] {
				t.Errorf("%s: %s is no stream or bucket of streams.Names", filepath.Base(doc), r)
			}
		}
	}
}
