// Package docstest checks that the commands the documentation prints work
// as printed. Blocks finds every fenced shell block of README.md and the
// pages under docs/ with the marker before it: `<!-- runnable -->` for a
// block the tests run against a demo stack, `<!-- not runnable: REASON -->`
// for one they leave alone. A shell block with neither marker is an error,
// so a new command is either run or deliberately left out.
//
//	blocks, err := docstest.Blocks(root)
//	for _, b := range blocks {
//		if b.Runnable { … run b.Script in bash … }
//	}
package docstest
