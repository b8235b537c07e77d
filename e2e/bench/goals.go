package main

// The per-call rows that issue 27's goals are computed from, by name:
// each is a path of the same paced, shuffled rounds (perCall).
const (
	gitHostRow           = "git_diff_input's git runs on the host"
	builtinGitDiffRow    = "built-in git_diff_input"
	builtinGitDiffOffRow = "built-in git_diff_input, pool off"
)
