package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

const module = "github.com/jetflow-io/jetflow"

// call is one line of dlv trace's output: a function entered or returning,
// on goroutine g.
type call struct {
	line int
	g    string
	name string
	ret  bool
}

var (
	entryRE = regexp.MustCompile(`^> goroutine\((\d+)\): (.*)$`)
	retRE   = regexp.MustCompile(`^>> goroutine\((\d+)\): (.*?) => `)
	// closureRE matches what the compiler appends to a function's name
	// for its closures, deferred and go'd calls and method values.
	closureRE = regexp.MustCompile(`(\.func\d+|\.deferwrap\d+|\.gowrap\d+|-fm|-range\d+)+(\.\d+)*$`)
	// taskRE names the functions that only the task's own path enters.
	taskRE = regexp.MustCompile(`startDirect|\.offer$|execSide|attempt\.\(\*Executor\)|Acker\)\.publish`)
)

// step is one function entered on the task's path.
type step struct{ file, fn string }

// pathSummary is what report prints after the steps.
type pathSummary struct {
	files, returns int
	reentered      map[string]int
	order          []string // files in the order first entered
}

// report analyses the trace in name and writes the path and its summary.
func report(out io.Writer, name, root string) error {
	files, err := funcFiles(root)
	if err != nil {
		return err
	}
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	calls, err := readWindow(f)
	if err != nil {
		return err
	}
	path := taskPath(calls, files)
	if len(path) == 0 {
		return fmt.Errorf("no task path between the markers in %s", name)
	}
	for i, s := range path {
		fmt.Fprintf(out, "%3d  %-40s %s\n", i+1, s.file, s.fn)
	}
	sum := summarize(path)
	fmt.Fprintf(out, "\nfunctions entered: %d\nfiles: %d\nreturns to a file already left: %d\n", len(path), sum.files, sum.returns)
	for _, f := range sum.order {
		if n := sum.reentered[f]; n > 0 {
			fmt.Fprintf(out, "  %-40s re-entered %d\n", f, n)
		}
	}
	return nil
}

// taskPath returns the functions of the module entered on the task's
// path, in order.
func taskPath(calls []call, files map[string]string) []step {
	var path []step
	for _, ep := range episodes(calls) {
		for _, c := range ep {
			n := normalize(c.name)
			if c.ret || !strings.HasPrefix(n, module+"/") {
				continue
			}
			f, ok := files[n]
			if !ok {
				continue // a wrapper the compiler made (a promoted method)
			}
			path = append(path, step{f, strings.TrimPrefix(n, module+"/")})
		}
	}
	return path
}

// summarize counts the files of path and the returns to a file already
// left.
func summarize(path []step) pathSummary {
	sum := pathSummary{reentered: map[string]int{}}
	seen := map[string]bool{}
	last := ""
	for _, s := range path {
		if s.file == last {
			continue
		}
		if seen[s.file] {
			sum.returns++
			sum.reentered[s.file]++
		} else {
			sum.order = append(sum.order, s.file)
		}
		seen[s.file] = true
		last = s.file
	}
	sum.files = len(seen)
	sort.SliceStable(sum.order, func(i, j int) bool { return sum.reentered[sum.order[i]] > sum.reentered[sum.order[j]] })
	return sum
}

// normalize drops generic instantiations and the suffixes of closures.
func normalize(n string) string {
	var b strings.Builder
	depth := 0
	for _, r := range n {
		switch {
		case r == '[':
			depth++
		case r == ']':
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return closureRE.ReplaceAllString(b.String(), "")
}

// readWindow reads the calls between the markers.
func readWindow(r io.Reader) ([]call, error) {
	var out []call
	in := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for i := 0; sc.Scan(); i++ {
		l := sc.Text()
		switch {
		case strings.Contains(l, "main.traceBegin()"):
			in = true
			continue
		case strings.Contains(l, "main.traceEnd()"):
			return out, nil
		case !in:
			continue
		}
		if m := retRE.FindStringSubmatch(l); m != nil {
			out = append(out, call{i, m[1], m[2], true})
		} else if m := entryRE.FindStringSubmatch(l); m != nil {
			out = append(out, call{i, m[1], funcName(m[2]), false})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no complete traceBegin … traceEnd window")
}

// funcName cuts the argument list from an entry: it starts at the first
// "(" that does not follow a "." (which opens a receiver, "(*T)").
func funcName(s string) string {
	for i := 1; i < len(s); i++ {
		if s[i] == '(' && s[i-1] != '.' {
			return s[:i]
		}
	}
	return s
}

// episodes splits each goroutine's calls where its depth of traced calls
// returns to zero and keeps those that touch the task, in the order they
// began.
func episodes(calls []call) [][]call {
	depth := map[string]int{}
	open := map[string][]call{}
	var eps [][]call
	flush := func(g string) {
		ep := open[g]
		for _, c := range ep {
			if !c.ret && taskRE.MatchString(normalize(c.name)) {
				eps = append(eps, ep)
				break
			}
		}
		delete(open, g)
	}
	for _, c := range calls {
		open[c.g] = append(open[c.g], c)
		if !c.ret {
			depth[c.g]++
			continue
		}
		if depth[c.g]--; depth[c.g] <= 0 {
			depth[c.g] = 0
			flush(c.g)
		}
	}
	for g := range open {
		flush(g)
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i][0].line < eps[j][0].line })
	return eps
}

// funcFiles maps each function and method of the module's library
// packages (not tests, examples or the bench) to its file.
func funcFiles(root string) (map[string]string, error) {
	out := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch {
			case rel == ".":
			case strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", rel == "bench", rel == "examples":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := module + "/" + filepath.ToSlash(filepath.Dir(rel))
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := pkg + "." + fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = pkg + "." + recvName(fd.Recv.List[0].Type) + "." + fd.Name.Name
			}
			out[name] = filepath.ToSlash(rel)
		}
		return nil
	})
	return out, err
}

// recvName spells a receiver as dlv does: "(*T)" or "T".
func recvName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		return "(*" + typeName(s.X) + ")"
	}
	return typeName(e)
}

func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.IndexListExpr:
		return typeName(t.X)
	}
	return "?"
}
