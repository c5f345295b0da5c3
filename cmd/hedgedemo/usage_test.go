package main

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain runs the command itself when the test binary is started with
// HEDGEDEMO_RUN_MAIN set, so that a test can run the real main, flags
// and exit status included.
func TestMain(m *testing.M) {
	if os.Getenv("HEDGEDEMO_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestUsage runs hedgedemo -h: it names the command as a user types it,
// not the file a go run built, says what the demo does, and explains
// every flag.
func TestUsage(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-h")
	cmd.Env = append(os.Environ(), "HEDGEDEMO_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hedgedemo -h: %v\n%s", err, out)
	}
	text := string(out)
	if !strings.HasPrefix(text, "usage: hedgedemo [flags]\n") {
		t.Errorf("hedgedemo -h does not start with its usage line:\n%s", text)
	}
	if strings.Contains(text, os.Args[0]) || strings.Contains(text, "go-build") {
		t.Errorf("hedgedemo -h names the binary's path:\n%s", text)
	}
	for _, want := range []string{
		"shows what hedging does to tail latency",
		"With -load it sweeps the offered load",
		"a bar on a\nterminal, a plain line every few seconds in a log",
		"warns when the\nmachine was too busy",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("hedgedemo -h does not say %q:\n%s", want, text)
		}
	}
	var cfg config
	var addr string
	newFlags(&cfg, &addr, flag.ContinueOnError).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(text, "\n  -"+f.Name+" ") && !strings.Contains(text, "\n  -"+f.Name+"\n") {
			t.Errorf("hedgedemo -h does not explain -%s:\n%s", f.Name, text)
		}
	})
}

// TestRejectsArguments: the demo takes flags only, and says so of a word
// it was given instead of running without it.
func TestRejectsArguments(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-calls", "10", "load")
	cmd.Env = append(os.Environ(), "HEDGEDEMO_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `hedgedemo: unexpected argument "load"`) {
		t.Errorf("hedgedemo -calls 10 load: %v\n%s", err, out)
	}
}
