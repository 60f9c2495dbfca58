package docstest

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Block is one fenced shell block of a page.
type Block struct {
	File     string // relative to the repository's root
	Line     int    // of the opening fence
	Runnable bool
	Reason   string // why it is not runnable
	Script   string
}

// Name is where the block is, as file:line.
func (b Block) Name() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

var (
	fence       = regexp.MustCompile("^(\\s*)(```+)\\s*([A-Za-z0-9_+-]*)")
	runnable    = regexp.MustCompile(`^<!--\s*runnable\s*-->$`)
	notRunnable = regexp.MustCompile(`^<!--\s*not runnable:\s*(\S.*?)\s*-->$`)
	shells      = map[string]bool{"sh": true, "bash": true, "shell": true}
)

// Pages is README.md and every Markdown file under docs/, relative to
// root.
func Pages(root string) ([]string, error) {
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	return pages, err
}

// Blocks reads every page and returns its shell blocks. It reports every
// shell block that has no marker, and every marker that is not followed
// by a shell block, at once.
func Blocks(root string) ([]Block, error) {
	pages, err := Pages(root)
	if err != nil {
		return nil, err
	}
	var blocks []Block
	var problems []error
	for _, page := range pages {
		bs, errs := pageBlocks(root, page)
		blocks = append(blocks, bs...)
		problems = append(problems, errs...)
	}
	return blocks, errors.Join(problems...)
}

func pageBlocks(root, page string) ([]Block, []error) {
	f, err := os.Open(filepath.Join(root, page))
	if err != nil {
		return nil, []error{err}
	}
	defer f.Close()
	var (
		blocks   []Block
		problems []error
		prev     string // the line before the current one
		open     *Block // the shell block being read
		closing  string // the fence that closes the block being skipped or read
		marked   int    // the line of a marker not yet followed by its block
		lineNo   int
		body     strings.Builder
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if closing != "" {
			if trimmed == closing {
				if open != nil {
					open.Script = body.String()
					blocks = append(blocks, *open)
					open = nil
				}
				closing = ""
			} else if open != nil {
				body.WriteString(line)
				body.WriteByte('\n')
			}
			prev = line
			continue
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			closing = m[2]
			marker := strings.TrimSpace(prev)
			switch {
			case shells[m[3]]:
				b := Block{File: page, Line: lineNo}
				if runnable.MatchString(marker) {
					b.Runnable = true
				} else if r := notRunnable.FindStringSubmatch(marker); r != nil {
					b.Reason = r[1]
				} else {
					problems = append(problems, fmt.Errorf("%s:%d: a %s block without <!-- runnable --> or <!-- not runnable: REASON --> on the line before it", page, lineNo, m[3]))
				}
				open = &b
				body.Reset()
			case marked != 0:
				problems = append(problems, fmt.Errorf("%s:%d: the marker is followed by a %q block, not a shell block", page, marked, m[3]))
			}
			marked = 0
			prev = line
			continue
		}
		if marked != 0 && trimmed != "" {
			problems = append(problems, fmt.Errorf("%s:%d: the marker is not on the line right before a shell block", page, marked))
			marked = 0
		}
		if runnable.MatchString(trimmed) || notRunnable.MatchString(trimmed) {
			marked = lineNo
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		problems = append(problems, fmt.Errorf("%s: %w", page, err))
	}
	if closing != "" {
		problems = append(problems, fmt.Errorf("%s: a code block is never closed", page))
	}
	return blocks, problems
}
