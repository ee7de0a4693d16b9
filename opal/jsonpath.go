package opal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// A doc is a JSON document read for strict checking: its values by
// dotted path ("worker.hw.tflops", "workload.stages[1].type") and the
// line each key (or list element) starts on, so that every error can
// read FILE:LINE.
type doc struct {
	file  string
	data  []byte
	root  any
	lines map[string]int
	paths []string // every path, in document order
	// newlines holds the offset of every '\n' in data, so that the line
	// of an offset is a binary search: counting newlines from the start
	// at every key made indexing a config quadratic in its size.
	newlines []int
}

// parseDoc reads data, numbers kept as json.Number.
func parseDoc(file string, data []byte) (*doc, error) {
	d := &doc{file: file, data: data, lines: map[string]int{}}
	for i, c := range data {
		if c == '\n' {
			d.newlines = append(d.newlines, i)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&d.root); err != nil {
		return nil, d.syntaxError(err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s:%d: more than one JSON value: an Opal config is one object", file, d.lineAt(int(dec.InputOffset())))
	}
	if _, ok := d.root.(map[string]any); !ok {
		return nil, fmt.Errorf("%s:1: not a JSON object: an Opal config is one object of sections (simulation, model, router, workload, worker, kvc)", file)
	}
	d.index()
	return d, nil
}

func (d *doc) syntaxError(err error) error {
	var off int64
	switch e := err.(type) {
	case *json.SyntaxError:
		off = e.Offset
	case *json.UnmarshalTypeError:
		off = e.Offset
	default:
		return fmt.Errorf("%s:1: %v", d.file, err)
	}
	return fmt.Errorf("%s:%d: %v", d.file, d.lineAt(int(off)), err)
}

func (d *doc) lineAt(off int) int {
	off = min(max(off, 0), len(d.data))
	n, _ := slices.BinarySearch(d.newlines, off) // newlines before off
	return 1 + n
}

// index records the line of every key and list element, walking the
// token stream.
func (d *doc) index() {
	dec := json.NewDecoder(bytes.NewReader(d.data))
	dec.UseNumber()
	type frame struct {
		path  string
		list  bool
		index int
		key   string // the key whose value comes next (objects)
		want  bool   // objects: the next string is a key
	}
	var stack []*frame
	valuePath := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.list {
			p := f.path + "[" + strconv.Itoa(f.index) + "]"
			f.index++
			return p
		}
		return join(f.path, f.key)
	}
	for {
		before := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return
		}
		if len(stack) > 0 {
			f := stack[len(stack)-1]
			if !f.list && f.want {
				if s, ok := tok.(string); ok {
					f.key, f.want = s, false
					p := join(f.path, s)
					d.lines[p] = d.lineAt(int(dec.InputOffset()))
					d.paths = append(d.paths, p)
					continue
				}
			}
		}
		if delim, ok := tok.(json.Delim); ok && (delim == '}' || delim == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && !stack[len(stack)-1].list {
				stack[len(stack)-1].want = true
			}
			continue
		}
		p := valuePath()
		if len(stack) > 0 && stack[len(stack)-1].list {
			d.lines[p] = d.lineAt(before + 1)
			d.paths = append(d.paths, p)
		}
		if delim, ok := tok.(json.Delim); ok {
			stack = append(stack, &frame{path: p, list: delim == '[', want: delim == '{'})
			continue
		}
		if len(stack) > 0 && !stack[len(stack)-1].list {
			stack[len(stack)-1].want = true
		}
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// line returns the line of path, or of its nearest ancestor the document
// has (1 if none).
func (d *doc) line(path string) int {
	for p := path; p != ""; {
		if l, ok := d.lines[p]; ok {
			return l
		}
		i := max(bytes.LastIndexByte([]byte(p), '.'), bytes.LastIndexByte([]byte(p), '['))
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 1
}

// errorf is an error at path's line: "FILE:LINE: PATH: what".
func (d *doc) errorf(path, format string, a ...any) error {
	return fmt.Errorf("%s:%d: %s: %s", d.file, d.line(path), path, fmt.Sprintf(format, a...))
}

// get returns the value at path, or false.
func (d *doc) get(path string) (any, bool) {
	v := d.root
	for _, part := range splitPath(path) {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[part.key]; !ok {
				return nil, false
			}
		case []any:
			if part.index < 0 || part.index >= len(x) {
				return nil, false
			}
			v = x[part.index]
		default:
			return nil, false
		}
	}
	return v, true
}

type pathPart struct {
	key   string
	index int // for a list element; the key is then ""
}

func splitPath(p string) []pathPart {
	var parts []pathPart
	for p != "" {
		switch {
		case p[0] == '.':
			p = p[1:]
		case p[0] == '[':
			end := bytes.IndexByte([]byte(p), ']')
			n, _ := strconv.Atoi(p[1:end])
			parts = append(parts, pathPart{index: n})
			p = p[end+1:]
		default:
			end := len(p)
			for i := range len(p) {
				if p[i] == '.' || p[i] == '[' {
					end = i
					break
				}
			}
			parts = append(parts, pathPart{key: p[:end], index: -1})
			p = p[end:]
		}
	}
	return parts
}
