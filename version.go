package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time by the Makefile with
// -ldflags "-X main.version=$(git describe --tags --always --dirty)".
var version = ""

// commit is set by the Makefile (git rev-parse HEAD) for builds that carry
// no VCS stamp; the build info's vcs.revision wins when present.
var commit = ""

// buildInfo is what `imserver version` and /healthz report.
type buildInfo struct {
	Version  string // main.version, else the module version, else "dev"
	Commit   string // vcs.revision ("" when built without VCS info)
	Time     string // vcs.time: the commit's time
	Modified bool   // vcs.modified: built from a tree with uncommitted changes
	Go       string
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit}
	if info, ok := debug.ReadBuildInfo(); ok {
		b.Go = info.GoVersion
		if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

func (b buildInfo) String() string {
	s := "imserver " + b.Version
	if b.Commit != "" {
		s += "\ncommit " + b.Commit
		if b.Modified {
			s += " (modified)"
		}
	}
	if b.Time != "" {
		s += "\ncommitted " + b.Time
	}
	if b.Go != "" {
		s += "\nbuilt with " + b.Go
	}
	return s
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build details",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), readBuildInfo())
			return nil
		},
	}
}
