package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteIfChanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.conf")

	wrote, err := WriteIfChanged(path, []byte("one\n"))
	if err != nil || !wrote {
		t.Fatalf("first write = %v, %v; want true, nil", wrote, err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != DefaultMode {
		t.Errorf("new file mode = %v, want %v", st.Mode().Perm(), DefaultMode)
	}
	before := st.ModTime()

	wrote, err = WriteIfChanged(path, []byte("one\n"))
	if err != nil || wrote {
		t.Fatalf("same content = %v, %v; want false, nil", wrote, err)
	}
	if st, _ := os.Stat(path); !st.ModTime().Equal(before) {
		t.Error("unchanged content touched the file")
	}

	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	wrote, err = WriteIfChanged(path, []byte("two\n"))
	if err != nil || !wrote {
		t.Fatalf("changed content = %v, %v; want true, nil", wrote, err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "two\n" {
		t.Errorf("content = %q, want %q", got, "two\n")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode after rewrite = %v, want the file's 0600 kept", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d files, want only out.conf (no temp files left)", len(entries))
	}
}

func TestWriteIfChangedMissingDir(t *testing.T) {
	_, err := WriteIfChanged(filepath.Join(t.TempDir(), "no", "such", "out"), []byte("x"))
	if err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

func TestWriteIfChangedRewritesDeletedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	if _, err := WriteIfChanged(path, []byte("x")); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if wrote, err := WriteIfChanged(path, []byte("x")); err != nil || !wrote {
		t.Fatalf("after deletion = %v, %v; want the file written again", wrote, err)
	}
}
