package zkrules

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/sluicehq/sluice/config"
)

// cacheFile is the cache's layout: the parent path and each good rule's
// znode data.
type cacheFile struct {
	Path  string                     `json:"path"`
	Rules map[string]json.RawMessage `json:"rules"`
}

// SaveCache writes a set's good rules to file atomically (a temporary file
// renamed over it), for LoadCache after a restart.
func SaveCache(file, parent string, s Set) error {
	c := cacheFile{Path: parent, Rules: map[string]json.RawMessage{}}
	for id, data := range s.Data {
		if !json.Valid(data) {
			// YAML in a znode: keep it as a JSON string of the text.
			data, _ = json.Marshal(string(data))
		}
		c.Rules[id] = data
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// LoadCache reads the rules SaveCache wrote for parent, each decoded and
// checked as a znode's data is. A cache for another path, or any bad rule
// in it, is an error: the caller starts without it.
func LoadCache(file, parent string, check func(config.Rule) error) ([]config.Rule, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var c cacheFile
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if c.Path != parent {
		return nil, fmt.Errorf("%s: holds the rules of %s, not %s", file, c.Path, parent)
	}
	rules := make([]config.Rule, 0, len(c.Rules))
	for _, id := range slices.Sorted(maps.Keys(c.Rules)) {
		data := []byte(c.Rules[id])
		var text string
		if json.Unmarshal(data, &text) == nil {
			data = []byte(text)
		}
		r, err := decodeRule(id, data, check)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}
