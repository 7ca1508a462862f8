// Package toolbin builds and caches pinned tool binaries from the repository's
// tools/ modules for tests, and runs them as child processes killed with the test.
//
// A Tool names one binary: the separate module under tools/ that pins it (so the
// main module never requires it), the package to build, and the environment
// variables that opt in to it. Tool.Binary skips the test unless one of them is
// set, and otherwise returns a prebuilt binary or builds one into the user cache
// directory (os.UserCacheDir()/switchboard/NAME-VERSION), holding a file lock so
// that parallel test packages build it once. StartProcess runs a binary with its
// output in a log file and kills it, and on Linux the kernel kills it if the test
// binary dies without running its cleanups.
//
// It must not import any other Switchboard package, so that every test helper can
// use it.
package toolbin
