//go:build !race

package kurrentdbtest

// raceEnabled is true in a build with the race detector: BuildCommand then
// builds the command with it too, reusing the packages already compiled.
const raceEnabled = false
