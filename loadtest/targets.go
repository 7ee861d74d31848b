package loadtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// maxTargets bounds a targets file.
const maxTargets = 1_000_000

// ReadTargets reads a targets file in either of vegeta's formats, chosen by
// the first character: JSON lines ({"method","url","header","body"}, the
// body base64) or the HTTP format ("GET http://host/path", then
// "Header: value" lines and an optional "@bodyfile", a blank line between
// targets). header is added to every target.
func ReadTargets(r io.Reader, header http.Header) ([]vegeta.Target, error) {
	br := bufio.NewReader(io.LimitReader(r, 1<<30))
	first, err := firstByte(br)
	if err != nil {
		return nil, errors.New("targets: the file is empty")
	}
	var tr vegeta.Targeter
	if first == '{' {
		tr = vegeta.NewJSONTargeter(br, nil, header)
	} else {
		tr = vegeta.NewHTTPTargeter(br, nil, header)
	}
	var out []vegeta.Target
	for n := 1; ; n++ {
		var t vegeta.Target
		err := tr(&t)
		if errors.Is(err, vegeta.ErrNoTargets) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("targets: target %d: %w", n, err)
		}
		if err := checkURL(t.URL); err != nil {
			return nil, fmt.Errorf("targets: target %d: %w", n, err)
		}
		if len(out) == maxTargets {
			return nil, fmt.Errorf("targets: more than %d targets", maxTargets)
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("targets: no targets in the file")
	}
	return out, nil
}

func firstByte(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		if !bytes.ContainsRune([]byte(" \t\r\n"), rune(b)) {
			return b, br.UnreadByte()
		}
	}
}

// Target is a single-URL target for -target.
func Target(method, rawURL string, header http.Header, body []byte) (vegeta.Target, error) {
	if err := checkURL(rawURL); err != nil {
		return vegeta.Target{}, fmt.Errorf("-target: %w", err)
	}
	if method == "" {
		method = http.MethodGet
	}
	return vegeta.Target{Method: strings.ToUpper(method), URL: rawURL, Header: header, Body: body}, nil
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL with a host", raw)
	}
	return nil
}

// ParseHeader parses "Name: value" as given to -header.
func ParseHeader(h http.Header, s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("-header %q: want \"Name: value\"", s)
	}
	h.Add(name, strings.TrimSpace(value))
	return nil
}
