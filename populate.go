package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/imserver/imserver/bench/populate"
	"github.com/spf13/cobra"
)

func populateCommand() *cobra.Command {
	var o populate.Options
	cmd := &cobra.Command{
		Use:   "populate",
		Short: "Fill a new database with a generated team history (for benchmarks)",
		Long: `populate makes a new SQLite database holding a team's history through the
store's own write path: users (password "` + populate.Password + `", names pop0..),
direct and group conversations (user pop0 is in ` + fmt.Sprint(populate.ListConversations) + ` of them), --messages
messages spread over a Zipf law (a few busy groups, a long tail) with
timestamps over the last year, and read and ack positions. It writes with
sqlite.synchronous NORMAL (a generator, not a server: a machine crash would
only cost a rerun). It refuses a file that exists, except with --more,
which appends to a history it made (with FULL, as a server writes) and
reports the rate: the store's write cost at that database size.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.Progress = cmd.ErrOrStderr()
			if !cmd.Flags().Changed("sqlite-sync") {
				o.Synchronous = "" // NORMAL to make a history, FULL (a server's) with --more
			}
			st, err := populate.Run(ctx, o)
			if err != nil {
				return err
			}
			verb := "populated"
			if o.More {
				verb = "appended to"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %d users, %d directs, %d groups, %d member rows, %d messages in %.1fs (%.0f msgs/s), %d bytes (%.0f per message)\n",
				verb, o.DB, st.Users, st.Directs, st.Groups, st.MemberRows, st.Messages, st.Seconds, st.MessagesPerSec, st.FileBytes,
				float64(st.FileBytes)/float64(max(st.Messages, 1)))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.DB, "db", "", "database file to create (required; must not exist unless --more)")
	f.IntVar(&o.Users, "users", 500, "users")
	f.IntVar(&o.Directs, "directs", 2000, "direct conversations")
	f.IntVar(&o.Groups, "groups", 300, "group conversations (sizes 3-500)")
	f.IntVar(&o.AllHands, "all-hands", 3, "groups that hold every user")
	f.IntVar(&o.Messages, "messages", 1000000, "messages")
	f.Float64Var(&o.ZipfS, "zipf", 1.1, "Zipf exponent of messages over conversations (> 1)")
	f.Uint64Var(&o.Seed, "seed", 1, "random seed (the same seed makes the same shape)")
	f.StringVar(&o.Synchronous, "sqlite-sync", "NORMAL", "sqlite.synchronous while populating (--more: FULL)")
	f.BoolVar(&o.NoMutations, "no-mutations", false, "text messages only (by default 10% are reactions and 3% edits of recent messages)")
	f.BoolVar(&o.More, "more", false, "append --messages to an existing generated history (wall-clock stamps) and report the rate: the writer's cost at that size")
	f.IntVar(&o.BatchSize, "batch", 5000, "messages per write transaction at most")
	f.IntVar(&o.Workers, "workers", 8, "concurrent appenders (each keeps 2,000 appends in flight)")
	cmd.MarkFlagRequired("db")
	return cmd
}
