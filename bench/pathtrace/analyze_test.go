package main

import (
	"os"
	"reflect"
	"testing"
)

func TestTaskPath(t *testing.T) {
	files, err := funcFiles("testdata/root")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("testdata/trace.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls, err := readWindow(f)
	if err != nil {
		t.Fatal(err)
	}
	path := taskPath(calls, files)
	want := []step{
		{"framework/fetch.go", "framework.(*Worker).startDirect"},
		{"framework/fetch.go", "framework.(*Worker).execute"},
		{"internal/attempt/executor.go", "internal/attempt.(*Executor).Run"},
		{"framework/execute.go", "framework.(*execSide).Prepare"},
		{"framework/execute.go", "framework.fillTask"},
		{"internal/attempt/executor.go", "internal/attempt.(*Executor).call"},
		{"framework/execute.go", "framework.(*execSide).Call"},
	}
	if !reflect.DeepEqual(path, want) {
		t.Fatalf("path:\n%v\nwant:\n%v", path, want)
	}
	sum := summarize(path)
	if sum.files != 3 || sum.returns != 2 || sum.reentered["framework/execute.go"] != 1 || sum.reentered["internal/attempt/executor.go"] != 1 {
		t.Fatalf("summary %+v, want 3 files, 2 returns, one each to execute.go and executor.go", sum)
	}
}

func TestFuncName(t *testing.T) {
	for in, want := range map[string]string{
		`github.com/x/y.(*Iter).handle-fm(("*nats.Msg")(0x1))`: `github.com/x/y.(*Iter).handle-fm`,
		`github.com/x/y.f()`:              `github.com/x/y.f`,
		`github.com/x/y.Priority.Rank(2)`: `github.com/x/y.Priority.Rank`,
	} {
		if got := funcName(in); got != want {
			t.Errorf("funcName(%q) = %q, want %q", in, got, want)
		}
	}
	if got := normalize("a/b.(*Executor[go.shape.*a/b.p]).Run.func2.1"); got != "a/b.(*Executor).Run" {
		t.Errorf("normalize = %q", got)
	}
}
