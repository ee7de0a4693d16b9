package termsafe

import "testing"

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"llama-3.1-8b", "llama-3.1-8b"},
		{"Qwen/Qwen3 ✓ 32B", "Qwen/Qwen3 ✓ 32B"},
		{"\x1b]0;pwned\x07model", `\x1b]0;pwned\amodel`},
		{"a\nb\tc", `a\nb\tc`},
		{"\x9b31m", `\x9b31m`}, // an invalid byte (a raw C1 CSI)
		{"\u009b31m", `\u009b31m`},
		{"abc\u202edef", `abc\u202edef`},
		{"x\x7f", `x\x7f`},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	if got, want := Text("a\tb\n\x1b[2Jc"), "a\tb\n\\x1b[2Jc"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

func FuzzString(f *testing.F) {
	f.Add("\x1b[31mred")
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		for _, r := range out {
			if Unsafe(r) {
				t.Fatalf("String(%q) = %q keeps %U", s, out, r)
			}
		}
		if !needs(s) && out != s {
			t.Fatalf("safe %q changed to %q", s, out)
		}
	})
}
