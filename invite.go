package main

import (
	"context"
	"fmt"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/server"
	"github.com/spf13/cobra"
)

// inviteCommand makes invites from the command line: how the first admin
// gets in when registration is by invite.
func inviteCommand() *cobra.Command {
	var configPath, db, baseURL string
	var maxUses int
	var expires time.Duration
	cmd := &cobra.Command{Use: "invite", Short: "Manage invites"}
	cmd.PersistentFlags().StringVar(&configPath, "config", "", "YAML configuration file")
	cmd.PersistentFlags().StringVar(&db, "db", "", "SQLite database file or postgres:// URL (default imserver.db; env IMSERVER_DB)")
	create := &cobra.Command{
		Use:          "create",
		Short:        "Create an invite and print its link",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withService(cmd, configPath, db, func(ctx context.Context, cfg Config, svc *chat.Service) error {
				inv, err := svc.CreateInvite(ctx, chat.User{ID: chat.CLIInviter}, chat.InviteRequest{
					MaxUses: maxUses, ExpiresInMS: expires.Milliseconds()}, true)
				if err != nil {
					return err
				}
				base := baseURL
				if base == "" {
					base = publicURL(cfg)
				}
				out := cmd.OutOrStdout()
				fmt.Fprintln(out, server.InviteURL(base, inv.Code))
				fmt.Fprintf(out, "code %s, expires %s", inv.Code, time.UnixMilli(inv.ExpiresAt).UTC().Format(time.RFC3339))
				if inv.MaxUses > 0 {
					fmt.Fprintf(out, ", %d use(s)", inv.MaxUses)
				}
				fmt.Fprintln(out)
				return nil
			})
		},
	}
	create.Flags().IntVar(&maxUses, "max-uses", 1, "registrations the invite allows (0 = no limit)")
	create.Flags().DurationVar(&expires, "expires", chat.DefaultInviteExpiry, "how long the invite is valid")
	create.Flags().StringVar(&baseURL, "url", "", "the server's public URL (default http.public_url, else from tls/addr)")
	cmd.AddCommand(create)
	return cmd
}
