package pods

import "os"

// SetFileSync replaces the fsync of the store's written files; set it before the
// store is used.
func SetFileSync(s *Store, f func(*os.File) error) { s.fileSync = f }

// SetDirSync replaces the fsync of the store's directory; set it before the store is
// used.
func SetDirSync(s *Store, f func(dir string) error) { s.dirSync = f }
