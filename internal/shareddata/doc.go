// Package shareddata locates the real example files under ../shared/data
// for tests. The files without a licence cannot live in the repository, so
// tests read them in place: absent, a test is skipped with a clear message,
// except under CI=true, where a missing file is a failure.
package shareddata
