package framework_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestMisplacedOptionDoesNotCompile type-checks testdata/misplaced, a
// program that passes options to constructors they do not apply to, and
// expects exactly one type error on each line marked "// ERROR <option>".
func TestMisplacedOptionDoesNotCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the framework from source")
	}
	t.Parallel()
	const file = "testdata/misplaced/main.go.txt"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "main.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	want := make(map[int]string) // line → option named in the ERROR mark
	mark := regexp.MustCompile(`// ERROR (\w+)`)
	for i, line := range strings.Split(string(src), "\n") {
		if m := mark.FindStringSubmatch(line); m != nil {
			want[i+1] = m[1]
		}
	}
	if len(want) == 0 {
		t.Fatal("no ERROR marks in " + file)
	}
	got := make(map[int][]string)
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "source", nil),
		Error: func(err error) {
			te := err.(types.Error)
			line := te.Fset.Position(te.Pos).Line
			got[line] = append(got[line], te.Msg)
		},
	}
	_, _ = conf.Check("main", fset, []*ast.File{f}, nil)
	for line, opt := range want {
		msgs := got[line]
		if len(msgs) != 1 {
			t.Errorf("line %d (%s): %d type errors %q, want 1", line, opt, len(msgs), msgs)
			continue
		}
		if !strings.Contains(msgs[0], "does not implement") {
			t.Errorf("line %d (%s): error %q, want a missing option interface", line, opt, msgs[0])
		}
	}
	for line, msgs := range got {
		if _, ok := want[line]; !ok {
			t.Errorf("line %d: unexpected type errors %q", line, msgs)
		}
	}
}
