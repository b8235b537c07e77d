//go:build race

package policy

const raceOn = true
