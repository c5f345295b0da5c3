package docs_test

import (
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	// mdLink matches a Markdown link or image, and an HTML src or href:
	// the target is the first group that matched.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)|(?:src|href)="([^"]+)"`)
	// inlineCode is a code span, whose brackets are not links.
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	// scheme starts an absolute URL: http:, mailto:...
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose returns the lines of a Markdown text that are not code: fenced
// blocks blanked, code spans removed. The line numbers stay.
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
			continue
		}
		lines[i] = inlineCode.ReplaceAllString(line, "")
	}
	return lines
}

// anchors returns the anchors GitHub gives a Markdown text's headings:
// lowercased, with every character but letters, digits, '-', '_' and
// spaces dropped and spaces made '-'; a repeated one takes -1, -2...
func anchors(text string) map[string]bool {
	seen := make(map[string]int)
	out := make(map[string]bool)
	for _, line := range prose(text) {
		heading, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		heading = strings.TrimLeft(heading, "#")
		if !strings.HasPrefix(heading, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestLinks checks that every relative link of README.md, BENCHMARKS.md
// and docs/*.md names a file of the repository, and, with a #fragment into
// a Markdown file, one of its headings.
func TestLinks(t *testing.T) {
	paths, names := markdownFiles(t)
	texts := make(map[string]string) // by name from the repository's root
	for i, p := range paths {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		texts[names[i]] = string(text)
	}
	links := 0
	for _, name := range names {
		for n, line := range prose(texts[name]) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1] + m[2]
				if scheme.MatchString(target) {
					continue
				}
				links++
				file, fragment, _ := strings.Cut(target, "#")
				resolved := name // a bare #fragment is into this file
				if file != "" {
					resolved = path.Join(path.Dir(name), file)
					if _, err := os.Stat("../" + resolved); err != nil {
						t.Errorf("%s:%d: %s: no such file", name, n+1, target)
						continue
					}
				}
				if fragment == "" || !strings.HasSuffix(resolved, ".md") {
					continue
				}
				text, ok := texts[resolved]
				if !ok {
					b, err := os.ReadFile("../" + resolved)
					if err != nil {
						t.Fatal(err)
					}
					text = string(b)
				}
				if !anchors(text)[fragment] {
					t.Errorf("%s:%d: %s: %s has no heading with that anchor", name, n+1, target, resolved)
				}
			}
		}
	}
	t.Logf("%d relative links in %d files", links, len(names))
}
