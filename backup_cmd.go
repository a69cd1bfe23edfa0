package main

import (
	"fmt"
	"io"
	"os"

	"github.com/imserver/imserver/backup"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// dataFlags are the flags that find the data: a config file, or the
// database (and files directory) given directly.
type dataFlags struct {
	config, db, filesDir string
}

func (d *dataFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&d.config, "config", "", "YAML configuration file (for db and files.dir)")
	cmd.Flags().StringVar(&d.db, "db", "", "SQLite database file (default imserver.db) or PostgreSQL URL")
	cmd.Flags().StringVar(&d.filesDir, "files-dir", "", `files directory (default: files.dir, or "<db>-files")`)
}

func (d *dataFlags) options(cmd *cobra.Command) (backup.Options, error) {
	cfg, err := loadConfig(d.config)
	if err != nil {
		return backup.Options{}, err
	}
	if cmd.Flags().Changed("db") {
		cfg.DB = d.db
	}
	if cmd.Flags().Changed("files-dir") {
		cfg.Files.Dir = d.filesDir
	}
	o := backup.Options{DB: cfg.DB, FilesDir: cfg.filesDir(), Version: readBuildInfo().Version}
	if isPostgres(cfg.DB) {
		// No database file to put the files beside: files.dir or nothing.
		o.FilesDir = cfg.Files.Dir
	}
	// Progress only where someone watches it, never into a log.
	if term.IsTerminal(int(os.Stderr.Fd())) {
		o.Progress = cmd.ErrOrStderr()
	}
	return o, nil
}

func backupCommand() *cobra.Command {
	var d dataFlags
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Write the database and every file to one archive (safe while the server runs)",
		Long: `Write a consistent snapshot of the database (VACUUM INTO on a connection of its
own, so a running server keeps serving) and every file it references to one tar
archive, gzip-compressed when FILE ends in .gz or .tgz, with a manifest of counts
and SHA-256 checksums. Progress is shown when stderr is a terminal.

On PostgreSQL the snapshot is pg_dump's custom format (entry imserver.pgdump; a
repeatable-read snapshot, so nodes keep serving, and the files archived are the
ones it names). pg_dump is looked for on PATH, then in pg_config --bindir; it
must be of the server's major version or newer.`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := d.options(cmd)
			if err != nil {
				return err
			}
			if !isPostgres(o.DB) {
				if _, err := os.Stat(o.DB); err != nil {
					return fmt.Errorf("database %s: %w", o.DB, err)
				}
			}
			m, err := backup.Create(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			summary(cmd.OutOrStdout(), "backed up to "+args[0], m)
			for _, h := range m.Missing {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: file content %s was deleted while the backup ran; it is not in the archive\n", h)
			}
			return nil
		},
	}
	d.add(cmd)
	return cmd
}

func restoreCommand() *cobra.Command {
	var d dataFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a backup archive into the data directory (stop the server first)",
		Long: `Unpack a backup made by "imserver backup" into the database and files directory
that the config (or --db and --files-dir) names. Every entry is checked against the
manifest's checksums before anything is moved into place; a damaged archive
changes nothing. Existing data is only replaced with --force.

On PostgreSQL the dump is loaded with pg_restore in one transaction into the
database of the URL (create it first; --force drops the dump's objects first),
then the files are moved into files.dir. Stop every node first.`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := d.options(cmd)
			if err != nil {
				return err
			}
			m, err := backup.Restore(cmd.Context(), args[0], o, force)
			if err != nil {
				return err
			}
			what := "restored " + displayDB(o.DB)
			if o.FilesDir != "" {
				what += " and " + o.FilesDir
			}
			summary(cmd.OutOrStdout(), what, m)
			return nil
		},
	}
	d.add(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing database and files directory")
	return cmd
}

func summary(w io.Writer, what string, m backup.Manifest) {
	var bytes int64
	for _, e := range m.Entries {
		bytes += e.Size
	}
	fmt.Fprintf(w, "%s: %d users, %d conversations, %d messages, %d files (%.1f MiB; imserver %s, schema %d)\n",
		what, m.Users, m.Conversations, m.Messages, m.Files, float64(bytes)/(1<<20), m.Version, m.Schema)
}
