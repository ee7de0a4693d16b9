package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LoadCluster reads the cluster file at path (see ParseCluster); an empty
// path is DefaultCluster.
func LoadCluster(path string) (Cluster, error) {
	if path == "" {
		return DefaultCluster(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Cluster{}, err
	}
	return ParseCluster(path, data)
}

// ParseCluster reads a cluster file, named file in errors, over
// DefaultCluster. It is strict: the file is one YAML mapping, every key
// is known, every value has its key's type (a whole number where one is
// wanted: 2.5 workers is an error, not 2) and lies in its range (see
// check), and a key given with the value 0 is an error rather than the
// default. Every error reads "FILE:LINE: KEY: what is wrong"; all of them
// are returned, joined.
func ParseCluster(file string, data []byte) (Cluster, error) {
	c := DefaultCluster()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return Cluster{}, fmt.Errorf("%s:1: the cluster file is empty: want a YAML mapping of settings, such as \"workers: 4\"", file)
		}
		return Cluster{}, yamlError(file, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == io.EOF:
	case err != nil:
		return Cluster{}, yamlError(file, err)
	default:
		return Cluster{}, fmt.Errorf("%s:%d: a second YAML document: a cluster file holds one", file, docLine(&next))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return Cluster{}, fmt.Errorf("%s:1: the cluster file is empty: want a YAML mapping of settings, such as \"workers: 4\"", file)
		}
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode || root.Tag == "!!null" {
		return Cluster{}, fmt.Errorf("%s:%d: want a mapping of settings (key: value), not %s", file, root.Line, kindName(root))
	}
	p := parser{file: file, c: &c}
	p.mapping(root, reflect.ValueOf(&c).Elem(), "")
	if len(p.errs) > 0 {
		return Cluster{}, errors.Join(p.errs...)
	}
	if err := c.check(); err != nil {
		return Cluster{}, err
	}
	return c, nil
}

// docLine is the line a YAML document starts on.
func docLine(n *yaml.Node) int {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return n.Content[0].Line
	}
	return n.Line
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// yamlError turns a YAML syntax error ("yaml: line 3: ...") into
// "FILE:3: ...".
func yamlError(file string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s:%s: %s", file, m[1], msg[len(m[0]):])
	}
	return fmt.Errorf("%s: %s", file, strings.TrimPrefix(msg, "yaml: "))
}

func kindName(n *yaml.Node) string {
	switch {
	case n.Tag == "!!null":
		return "an empty value"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "this"
}

// A parser decodes a cluster file's nodes into a Cluster, field by field,
// so that every error names its key and line.
type parser struct {
	file string
	c    *Cluster
	errs []error
}

func (p *parser) fail(n *yaml.Node, key, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s:%d: %s: %s", p.file, n.Line, key, fmt.Sprintf(format, args...)))
}

// mapping decodes the keys of n into the struct v; prefix is the dotted
// path of v ("" at the top).
func (p *parser) mapping(n *yaml.Node, v reflect.Value, prefix string) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		if seen[k.Value] {
			p.fail(k, path, "given twice")
			continue
		}
		seen[k.Value] = true
		f, ok := fieldByKey(v, k.Value)
		if !ok {
			p.fail(k, path, "unknown key (known here: %s)", strings.Join(keysOf(v.Type()), ", "))
			continue
		}
		before := len(p.errs)
		p.value(val, f, path)
		if len(p.errs) == before {
			p.c.mark(path, fmt.Sprintf("%s:%d", p.file, k.Line))
		}
	}
}

// value decodes n into f, the field at path.
func (p *parser) value(n *yaml.Node, f reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Tag == "!!null" {
		p.fail(n, path, "no value (leave the key out for the default)")
		return
	}
	switch f.Kind() {
	case reflect.Pointer:
		e := reflect.New(f.Type().Elem())
		before := len(p.errs)
		p.value(n, e.Elem(), path)
		if len(p.errs) == before {
			f.Set(e)
		}
		return
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			p.fail(n, path, "want a mapping of settings, not %s", kindName(n))
			return
		}
		p.mapping(n, f, path)
		return
	case reflect.Slice:
		// A list of settings (autoscale's scaling policies): each
		// element decoded as a value of its own, named KEY[I] from 1.
		if n.Kind != yaml.SequenceNode {
			p.fail(n, path, "want a list, not %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(f.Type(), len(n.Content), len(n.Content))
		before := len(p.errs)
		for i, e := range n.Content {
			p.value(e, s.Index(i), fmt.Sprintf("%s[%d]", path, i+1))
		}
		if len(p.errs) == before {
			f.Set(s)
		}
		return
	}
	if n.Kind != yaml.ScalarNode {
		p.fail(n, path, "want a single value, not %s", kindName(n))
		return
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if n.Tag != "!!bool" || n.Decode(&b) != nil {
			p.fail(n, path, "%q is not true or false", n.Value)
			return
		}
		f.SetBool(b)
	case reflect.Float32, reflect.Float64:
		x, ok := number(n)
		if !ok || math.IsNaN(x) || math.IsInf(x, 0) {
			p.fail(n, path, "%q is not a finite number", n.Value)
			return
		}
		f.SetFloat(x)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, ok := whole(n)
		if !ok {
			p.fail(n, path, "%s is not a whole number", quoteIfText(n))
			return
		}
		if f.OverflowInt(i) {
			p.fail(n, path, "%s is too large", n.Value)
			return
		}
		f.SetInt(i)
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
		i, ok := whole(n)
		if n.Tag == "!!int" {
			u, err := strconv.ParseUint(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
			if err == nil {
				f.SetUint(u)
				return
			}
		}
		if !ok || i < 0 {
			p.fail(n, path, "%s is not a non-negative whole number", quoteIfText(n))
			return
		}
		f.SetUint(uint64(i))
	default:
		p.fail(n, path, "cannot be set from a cluster file")
	}
}

// number reads an !!int or !!float scalar.
func number(n *yaml.Node) (float64, bool) {
	if n.Tag != "!!int" && n.Tag != "!!float" {
		return 0, false
	}
	var x float64
	if err := n.Decode(&x); err != nil {
		return 0, false
	}
	return x, true
}

// whole reads a whole number: an !!int, or an !!float with no fraction
// that fits an int64 (1e9 is a billion; 2.5 is not whole).
func whole(n *yaml.Node) (int64, bool) {
	if n.Tag == "!!int" {
		var i int64
		if err := n.Decode(&i); err == nil {
			return i, true
		}
		return 0, false
	}
	x, ok := number(n)
	if !ok || x != math.Trunc(x) || math.Abs(x) >= 1<<63 {
		return 0, false
	}
	return int64(x), true
}

func quoteIfText(n *yaml.Node) string {
	if n.Tag == "!!int" || n.Tag == "!!float" {
		return n.Value
	}
	return strconv.Quote(n.Value)
}

// fieldByKey returns the field of the struct v whose yaml key is key,
// looking into inline structs.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		name, inline, ok := yamlKey(t.Field(i))
		if !ok {
			continue
		}
		if inline {
			if f, ok := fieldByKey(v.Field(i), key); ok {
				return f, true
			}
			continue
		}
		if name == key {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// keysOf lists the yaml keys of the struct type t, sorted.
func keysOf(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		name, inline, ok := yamlKey(t.Field(i))
		if !ok {
			continue
		}
		if inline {
			keys = append(keys, keysOf(t.Field(i).Type)...)
			continue
		}
		keys = append(keys, name)
	}
	slices.Sort(keys)
	return keys
}

// yamlKey returns the yaml key of a struct field as yaml.v3 reads it (its
// tag's name, or the field's name in lower case), or whether the field is
// inlined; ok is false for an unexported field and one tagged "-",
// which yaml does not set (a replay setting the deploy package derives,
// such as an autoscaler's ReplicaWorkers: a file's "-" key is unknown).
func yamlKey(sf reflect.StructField) (name string, inline, ok bool) {
	if !sf.IsExported() || sf.Tag.Get("yaml") == "-" {
		return "", false, false
	}
	name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if strings.Contains(opts, "inline") {
		return "", true, true
	}
	if name == "" {
		name = strings.ToLower(sf.Name)
	}
	return name, false, true
}
