package docs_test

// TestSnippets type-checks every ```go block of README.md, BENCHMARKS.md
// and docs/*.md against the packages as they are now, so that a snippet
// that names a function, field or option that no longer exists fails here
// rather than in a reader's editor. A block is one of three kinds, told
// apart by how it parses:
//
//   - a whole file, when it has a package clause: checked as it stands, a
//     package of its own;
//   - declarations (func, type, var, const) at the top level: checked as a
//     file of a package;
//   - anything else, statements: checked as the body of a func that
//     returns error, so that a snippet may end with `return err`.
//
// The last two kinds import by themselves the packages of imports_test.go
// whose names they use (hedge, http, grpc...), and share a package with
// testdata/preamble.go, which declares what a snippet leaves to the reader
// (ctx, client, replicas, Profile...). A variable a snippet declares and
// never uses is no error there: a snippet shows how to get a value, not
// what the service then does with it. Errors are reported at the line of
// the Markdown file.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// snippet is one ```go block.
type snippet struct {
	file string // the Markdown file, from the repository's root
	line int    // the line of the block's first line of code
	code string
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// markdownFiles lists the Markdown files the tests read: their paths from
// this directory, and their names from the repository's root.
func markdownFiles(t *testing.T) (paths, names []string) {
	t.Helper()
	paths = []string{"../README.md", "../BENCHMARKS.md"}
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, docs...)
	for _, p := range paths {
		names = append(names, filepath.ToSlash(filepath.Join("docs", p))) // Join cleans docs/../README.md
	}
	return paths, names
}

// goBlocks returns the ```go blocks of a Markdown text, a block inside a
// list item included (its indentation is removed).
func goBlocks(name, text string) []snippet {
	var (
		blocks []snippet
		cur    *snippet
		indent string
		code   strings.Builder
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```go":
			cur = &snippet{file: name, line: n + 1}
			indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			code.Reset()
		case cur != nil && trimmed == "```":
			cur.code = code.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			code.WriteString(strings.TrimPrefix(line, indent))
			code.WriteByte('\n')
		}
	}
	return blocks
}

func TestSnippets(t *testing.T) {
	paths, names := markdownFiles(t)
	var snippets []snippet
	for i, p := range paths {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		snippets = append(snippets, goBlocks(names[i], string(text))...)
	}
	if len(snippets) == 0 {
		t.Fatal("no ```go block found: the Markdown moved?")
	}
	c := newChecker(t, snippets)
	for _, s := range snippets {
		for _, err := range c.check(s) {
			t.Error(err) // it names the Markdown file and line
		}
	}
	t.Logf("%d snippets in %d files", len(snippets), len(names))
}

// TestSnippetKinds checks that each kind of snippet is told apart and
// checked, and that an API that does not exist fails each of them.
func TestSnippetKinds(t *testing.T) {
	tests := []struct {
		name, code string
		fails      bool
	}{
		{"statements", "policy := hedge.Policy[Profile]{Delay: hedge.Fixed(time.Second)}\n_, err := hedge.Do(ctx, policy, nil)\nreturn err\n", false},
		{"statements, unknown field", "policy := hedge.Policy[Profile]{Delays: hedge.Fixed(time.Second)}\n", true},
		{"declarations", "func get(ctx context.Context) (Profile, error) {\n\treturn client.Profile(ctx, replicas[0], id)\n}\n", false},
		{"declarations, unknown function", "var d = hedge.Fixd(time.Second)\n", true},
		{"file", "package main\n\nimport \"github.com/tailcut/hedge\"\n\nfunc main() { _ = hedge.Policy[int]{} }\n", false},
		{"file, no preamble", "package main\n\nimport \"github.com/tailcut/hedge\"\n\nvar _ = hedge.Policy[Profile]{}\n", true},
		{"not Go", "hedge.Do(ctx, policy, fn) -> v\n", true},
	}
	var snippets []snippet
	for i, tt := range tests {
		snippets = append(snippets, snippet{file: "kinds.md", line: 10*i + 1, code: tt.code})
	}
	c := newChecker(t, snippets)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := c.check(snippets[i])
			if got := len(errs) > 0; got != tt.fails {
				t.Errorf("fails %t, want %t: %v", got, tt.fails, errs)
			}
			for _, err := range errs {
				if !strings.HasPrefix(err.Error(), "kinds.md:") {
					t.Errorf("error %q does not name the Markdown file", err)
				}
			}
		})
	}
}

// checker type-checks snippets.
type checker struct {
	fset     *token.FileSet
	imp      types.Importer
	preamble *ast.File
	byName   map[string]string // package name -> import path, of those imports_test.go offers
}

// newChecker builds the packages imports_test.go offers, and those that
// the whole files among snippets import, and returns a checker of them.
func newChecker(t *testing.T, snippets []snippet) *checker {
	t.Helper()
	c := &checker{fset: token.NewFileSet(), byName: make(map[string]string)}
	var err error
	c.preamble, err = parser.ParseFile(c.fset, "testdata/preamble.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	offered := offeredImports(t)
	paths := slices.Clone(offered)
	for _, s := range snippets {
		if f, err := parser.ParseFile(token.NewFileSet(), "", s.code, parser.ImportsOnly); err == nil {
			for _, spec := range f.Imports {
				p, _ := strconv.Unquote(spec.Path.Value)
				paths = append(paths, p)
			}
		}
	}
	pkgs := listExports(t, paths)
	for _, path := range offered {
		name := pkgs[path].Name
		if other, ok := c.byName[name]; ok {
			t.Fatalf("imports_test.go offers two packages named %s: %s and %s", name, other, path)
		}
		c.byName[name] = path
	}
	c.imp = importer.ForCompiler(c.fset, "gc", func(path string) (io.ReadCloser, error) {
		p, ok := pkgs[path]
		if !ok || p.Export == "" {
			return nil, fmt.Errorf("no export data for %q: add it to imports_test.go", path)
		}
		return os.Open(p.Export)
	})
	return c
}

// check type-checks one snippet and returns its errors.
func (c *checker) check(s snippet) []error {
	directive := fmt.Sprintf("//line %s:%d\n", s.file, s.line)
	if f, err := parser.ParseFile(token.NewFileSet(), "", s.code, parser.PackageClauseOnly); err == nil && f.Name != nil {
		file, err := parser.ParseFile(c.fset, s.file, directive+s.code, parser.SkipObjectResolution)
		if err != nil {
			return []error{err}
		}
		return typeCheck(c.fset, c.imp, file)
	}

	// Declarations, or else statements: parsed once to learn which
	// packages they name, then again with those imported.
	decls := true
	head, tail := "package snippet\n", ""
	probe, err := parser.ParseFile(token.NewFileSet(), "", head+s.code, parser.SkipObjectResolution)
	if err != nil {
		decls = false
		head, tail = "package snippet\nfunc _() error {\n", "\nreturn nil\n}\n"
		probe, err = parser.ParseFile(token.NewFileSet(), "", head+s.code+tail, parser.SkipObjectResolution)
		if err != nil {
			return []error{fmt.Errorf("%s: neither a file, declarations nor statements: %v", s, err)}
		}
	}
	var imports []string
	ast.Inspect(probe, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok {
			if path, ok := c.byName[x.Name]; ok {
				imports = append(imports, strconv.Quote(path))
			}
		}
		return true
	})
	slices.Sort(imports)
	imports = slices.Compact(imports)
	src := "package snippet\n"
	for _, p := range imports {
		src += "import " + p + "\n"
	}
	if !decls {
		src += "func _() error {\n"
	}
	src += directive + s.code + tail
	file, err := parser.ParseFile(c.fset, s.file, src, parser.SkipObjectResolution)
	if err != nil {
		return []error{err}
	}
	return typeCheck(c.fset, c.imp, c.preamble, file)
}

// typeCheck checks files as one package and returns its errors, but for
// variables and imports left unused.
func typeCheck(fset *token.FileSet, imp types.Importer, files ...*ast.File) []error {
	var errs []error
	conf := types.Config{
		Importer: imp,
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) && te.Soft &&
				(strings.Contains(te.Msg, "declared and not used") || strings.Contains(te.Msg, "imported and not used")) {
				return
			}
			errs = append(errs, err)
		},
	}
	conf.Check("snippet", fset, files, nil) // the errors went to conf.Error
	return errs
}

// offeredImports returns the import paths of imports_test.go.
func offeredImports(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "imports_test.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, spec := range f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// listedPackage is what go list says of a package.
type listedPackage struct {
	ImportPath, Name, Export string
	Error                    *struct{ Err string }
}

// listExports builds paths and their dependencies, as this module
// requires them, and returns each package's export data.
func listExports(t *testing.T, paths []string) map[string]listedPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-export", "-e", "-json=ImportPath,Name,Export,Error", "--"}, paths...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := make(map[string]listedPackage)
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}
