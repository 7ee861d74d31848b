package sluice_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// normalize drops indentation and collapses runs of blanks, so that a
// snippet matches its gofmt'ed copy inside a function.
func normalize(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// Every Go snippet in the README is the body of a compiled Example test, so
// the README cannot drift from the API.
func TestREADMESnippetsAreExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no Go snippets in the README")
	}
	var examples strings.Builder
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "example_test.go" {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			examples.WriteString(normalize(string(b)) + "\n")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if !strings.Contains(examples.String(), normalize(b[1])) {
			t.Errorf("README snippet is not in any example_test.go:\n%s", b[1])
		}
	}
}

// Every YAML configuration in the README decodes strictly and validates,
// so an example a user copies works.
func TestREADMEConfigsValidate(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("no YAML configurations in the README")
	}
	for _, b := range blocks {
		cfg, err := config.Parse("README.md", []byte(b[1]))
		if err == nil {
			cfg.SetDefaults()
			err = cfg.Validate()
		}
		if err != nil {
			t.Errorf("README configuration does not validate: %v\n%s", err, b[1])
		}
	}
}
