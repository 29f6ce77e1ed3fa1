//go:build !race

package gpurt_test

const raceEnabled = false
