package main

import (
	"fmt"

	"github.com/imserver/imserver/postgres"
	"github.com/imserver/imserver/storage"
	"github.com/spf13/cobra"
)

func vacuumCommand() *cobra.Command {
	var configPath, db string
	var full bool
	cmd := &cobra.Command{
		Use:   "vacuum",
		Short: "Give the space of deleted messages back (SQLite: server stopped; PostgreSQL: VACUUM)",
		Long: `vacuum rebuilds the database file without its free pages: after retention
deleted old messages the file keeps its size (SQLite reuses the pages for
new messages) until it is vacuumed. It needs the file to itself and refuses
while a server (or any other process) has it open; it needs free space of
about the database's size while it runs.

On PostgreSQL it runs VACUUM (ANALYZE) on the growing tables (messages,
mentions, reactions, files, members, tokens ...) one by one, with the nodes
serving: dead rows' space becomes reusable and the planner's statistics are
fresh. Autovacuum does this by itself (on messages after 1,000 dead rows plus
1%); run it after a big deletion. --full runs VACUUM (FULL, ANALYZE), which
gives the space back to the file system and overwrites deleted messages'
bytes in the table files but locks each table while it rewrites it.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(configPath)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("db") {
				cfg.DB = db
			}
			if isPostgres(cfg.DB) {
				return vacuumPostgres(cmd, cfg.DB, full)
			}
			if full {
				return fmt.Errorf("--full is for PostgreSQL; on SQLite vacuum always rebuilds the whole file")
			}
			res, err := storage.Vacuum(cmd.Context(), cfg.DB)
			if err != nil {
				return fmt.Errorf("vacuum %s: %w", cfg.DB, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "vacuumed %s: %d -> %d bytes\n", cfg.DB, res.Before, res.After)
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML configuration file")
	cmd.Flags().StringVar(&db, "db", "", "SQLite database file (default imserver.db) or PostgreSQL URL")
	cmd.Flags().BoolVar(&full, "full", false, "PostgreSQL: VACUUM (FULL, ANALYZE), which locks each table while it rewrites it")
	return cmd
}

func vacuumPostgres(cmd *cobra.Command, url string, full bool) error {
	tables, err := postgres.Vacuum(cmd.Context(), url, full)
	w := cmd.OutOrStdout()
	var before, after int64
	for _, t := range tables {
		fmt.Fprintf(w, "%-14s %10d dead rows  %12d -> %12d bytes\n", t.Name, t.DeadRows, t.BytesBefore, t.BytesAfter)
		before += t.BytesBefore
		after += t.BytesAfter
	}
	if err != nil {
		return fmt.Errorf("vacuum %s: %w", displayDB(url), err)
	}
	kind := "VACUUM (ANALYZE)"
	if full {
		kind = "VACUUM (FULL, ANALYZE)"
	}
	fmt.Fprintf(w, "%s of %d tables of %s: %d -> %d bytes\n", kind, len(tables), displayDB(url), before, after)
	if !full {
		fmt.Fprintln(w, "(plain VACUUM makes dead rows' space reusable; the files shrink only with --full, which locks each table while it runs)")
	}
	return nil
}
