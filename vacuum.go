package main

import (
	"fmt"

	"github.com/imserver/imserver/storage"
	"github.com/spf13/cobra"
)

func vacuumCommand() *cobra.Command {
	var configPath, db string
	cmd := &cobra.Command{
		Use:   "vacuum",
		Short: "Give the space of deleted messages back to the file system (server stopped)",
		Long: `vacuum rebuilds the database file without its free pages: after retention
deleted old messages the file keeps its size (SQLite reuses the pages for
new messages) until it is vacuumed. It needs the file to itself and refuses
while a server (or any other process) has it open; it needs free space of
about the database's size while it runs.`,
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
			res, err := storage.Vacuum(cmd.Context(), cfg.DB)
			if err != nil {
				return fmt.Errorf("vacuum %s: %w", cfg.DB, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "vacuumed %s: %d -> %d bytes\n", cfg.DB, res.Before, res.After)
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML configuration file")
	cmd.Flags().StringVar(&db, "db", "", "SQLite database file (default imserver.db)")
	return cmd
}
