package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/imserver/imserver/chat"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// withService opens the database of the config (or the --db flag) for
// one command.
func withService(cmd *cobra.Command, configPath, db string, fn func(context.Context, Config, *chat.Service) error) error {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return err
	}
	applyDB(cmd, &cfg, db)
	ctx := cmd.Context()
	store, _, err := openStore(ctx, cfg, storeOptions{})
	if err != nil {
		return err
	}
	defer store.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := chat.NewService(store, nopDeliverer{}, chatConfig(cfg), log)
	defer svc.Close()
	return fn(ctx, cfg, svc)
}

// userCommand manages accounts directly in the database file; it works
// beside a running server (SQLite's WAL and busy timeout let it wait).
func userCommand() *cobra.Command {
	var configPath, db string
	cmd := &cobra.Command{Use: "user", Short: "Manage accounts"}
	cmd.PersistentFlags().StringVar(&configPath, "config", "", "YAML configuration file")
	cmd.PersistentFlags().StringVar(&db, "db", "", "SQLite database file or postgres:// URL (default imserver.db; env IMSERVER_DB)")

	withService := func(cmd *cobra.Command, fn func(context.Context, *chat.Service) error) error {
		return withService(cmd, configPath, db, func(ctx context.Context, _ Config, svc *chat.Service) error { return fn(ctx, svc) })
	}

	var password, displayName string
	add := &cobra.Command{
		Use:          "add NAME",
		Short:        "Create an account (asks for the password unless --password or stdin gives it)",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			pw, err := readPassword(cmd, password)
			if err != nil {
				return err
			}
			return withService(cmd, func(ctx context.Context, svc *chat.Service) error {
				u, err := svc.AddUser(ctx, args[0], pw, displayName)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "created %s (id %s)\n", u.Username, u.ID)
				return nil
			})
		},
	}
	add.Flags().StringVar(&password, "password", "", "password (visible in the process list: prefer the prompt or stdin)")
	add.Flags().StringVar(&displayName, "display-name", "", "display name (default: the username)")

	list := &cobra.Command{
		Use:          "list",
		Short:        "List accounts",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withService(cmd, func(ctx context.Context, svc *chat.Service) error {
				// Every account: the API's search stops at a page.
				users, err := svc.Accounts(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tUSERNAME\tDISPLAY NAME\tDISABLED")
				for _, u := range users {
					disabled := ""
					if u.Disabled {
						disabled = "yes"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.ID, u.Username, u.DisplayName, disabled)
				}
				return tw.Flush()
			})
		},
	}

	var newPassword string
	passwd := &cobra.Command{
		Use:          "passwd NAME",
		Short:        "Change a password; the account's tokens are revoked",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			pw, err := readPassword(cmd, newPassword)
			if err != nil {
				return err
			}
			return withService(cmd, func(ctx context.Context, svc *chat.Service) error {
				if err := svc.SetPassword(ctx, args[0], pw); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "password of %s changed\n", args[0])
				return nil
			})
		},
	}
	passwd.Flags().StringVar(&newPassword, "password", "", "new password")

	remove := &cobra.Command{
		Use:          "remove NAME",
		Short:        "Delete an account: it leaves its conversations, its messages stay",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withService(cmd, func(ctx context.Context, svc *chat.Service) error {
				if err := svc.RemoveUser(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(add, list, passwd, remove)
	return cmd
}

// readPassword takes the flag, else prompts without echo on a terminal,
// else reads one line of stdin (for scripts).
func readPassword(cmd *cobra.Command, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(cmd.ErrOrStderr(), "Password: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		return string(b), err
	}
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// nopDeliverer is the deliverer of CLI commands: no sessions to tell.
type nopDeliverer struct{}

func (nopDeliverer) Deliver([]string, *chat.Event) {}
func (nopDeliverer) DeliverAll([]chat.Delivery)    {}
