package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func configFile(t *testing.T, body string) string {
	t.Helper()
	return writeConfig(t, t.TempDir(), body)
}

// TestStormLowerMarkFollowsThreshold: lowering only the threshold starts;
// a lower mark the user set that is not below the threshold is an error.
func TestStormLowerMarkFollowsThreshold(t *testing.T) {
	for _, tc := range []struct {
		yaml    string
		env     []string
		want    int
		wantErr string
	}{
		{yaml: "storm:\n  threshold: 20\n", want: 10},
		{yaml: "storm:\n  threshold: 3\n", want: 1},
		{yaml: "storm:\n  threshold: 2\n", want: 1},
		{yaml: "", want: 50},
		{yaml: "storm:\n  threshold: 400\n", want: 200},
		{yaml: "storm:\n  threshold: 0\n", want: 1}, // storm mode off: not validated
		{env: []string{"IMSERVER_STORM_THRESHOLD=30"}, want: 15},
		{yaml: "storm:\n  threshold: 20\n  lower_mark: 5\n", want: 5},
		{yaml: "storm:\n  threshold: 20\n", env: []string{"IMSERVER_STORM_LOWER_MARK=7"}, want: 7},
		{yaml: "storm:\n  threshold: 20\n  lower_mark: 20\n", wantErr: "storm.lower_mark (20) must be below storm.threshold (20)"},
		{yaml: "storm:\n  threshold: 20\n  lower_mark: 50\n", wantErr: "storm.lower_mark (50) must be below storm.threshold (20)"},
		{yaml: "storm:\n  threshold: 1\n", wantErr: "storm.threshold must be 0 (off) or at least 2"},
	} {
		c, err := loadConfigFrom(configFile(t, tc.yaml), tc.env, nil)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q %v: err %v, want %q", tc.yaml, tc.env, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q %v: %v", tc.yaml, tc.env, err)
			continue
		}
		if c.Storm.LowerMark != tc.want {
			t.Errorf("%q %v: lower_mark %d, want %d", tc.yaml, tc.env, c.Storm.LowerMark, tc.want)
		}
	}
}

// TestBodyLimitCarriesFrameAndRequestLimits: raising max_body_bytes alone
// raises the frame and request limits so a full body still fits; lowering a
// frame limit alone lowers the body limit; both set inconsistently is an
// error naming the keys.
func TestBodyLimitCarriesFrameAndRequestLimits(t *testing.T) {
	c, err := loadConfigFrom(configFile(t, "limits:\n  max_body_bytes: 1000000\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.MaxFrameBytes < 2*1000000 || c.Limits.MaxRequestBytes < 2*1000000 {
		t.Fatalf("frame %d request %d: too small for a 1 MB body", c.Limits.MaxFrameBytes, c.Limits.MaxRequestBytes)
	}
	c, err = loadConfigFrom(configFile(t, ""), nil, nil)
	if err != nil || c.Limits.MaxFrameBytes != 65536 || c.Limits.MaxRequestBytes != 65536 || c.Limits.MaxBodyBytes != 16384 {
		t.Fatalf("defaults moved: %+v %v", c.Limits, err)
	}
	c, err = loadConfigFrom(configFile(t, "limits:\n  max_frame_bytes: 8192\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := int64(c.Limits.MaxBodyBytes) + frameOverhead; got > 8192 {
		t.Fatalf("body %d does not fit the 8192-byte frame", c.Limits.MaxBodyBytes)
	}
	_, err = loadConfigFrom(configFile(t, "limits:\n  max_body_bytes: 100000\n  max_frame_bytes: 65536\n"), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "limits.max_frame_bytes (65536) leaves no room for a message of limits.max_body_bytes (100000)") {
		t.Fatalf("inconsistent limits: %v", err)
	}
}

// TestEnvVariableForEveryKey: every key of Config has its variable, the
// names are unique, and each variable sets its key.
func TestEnvVariableForEveryKey(t *testing.T) {
	keys := configKeys()
	seen := map[string]string{}
	for _, k := range keys {
		v := envName(k)
		if other, dup := seen[v]; dup {
			t.Fatalf("keys %s and %s share the variable %s", k, other, v)
		}
		seen[v] = k
	}
	for _, want := range []string{"addr", "db", "redis", "storm.threshold", "limits.max_body_bytes", "auth.admins", "webhooks"} {
		if _, ok := seen[envName(want)]; !ok {
			t.Fatalf("no variable for %s in %v", want, keys)
		}
	}
	env := []string{
		"IMSERVER_ADDR=0.0.0.0:9000",
		"IMSERVER_DB=/data/x.db",
		"IMSERVER_REDIS=redis://r:6379/0",
		"IMSERVER_REDIS_PREFIX=p:",
		"IMSERVER_STORM_THRESHOLD=40",
		"IMSERVER_STORM_WINDOW=90s",
		"IMSERVER_LIMITS_MAX_BODY_BYTES=20000",
		"IMSERVER_LIMITS_SEND_RATE=2.5",
		"IMSERVER_AUTH_ADMINS=alice, bob",
		"IMSERVER_WEBSOCKET_ALLOWED_ORIGINS=[a.example, b.example]",
		"IMSERVER_DEBUG_PPROF=true",
		"IMSERVER_WEBHOOKS=[{url: 'https://h.example/x', events: [storm.started], secret: s}]",
		"PATH=/usr/bin",
	}
	c, err := loadConfigFrom("", env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "0.0.0.0:9000" || c.DB != "/data/x.db" || c.Redis != "redis://r:6379/0" || c.RedisPrefix != "p:" {
		t.Fatalf("strings: %q %q %q %q", c.Addr, c.DB, c.Redis, c.RedisPrefix)
	}
	if c.Storm.Threshold != 40 || c.Storm.LowerMark != 20 || c.Storm.Window != 90*time.Second {
		t.Fatalf("storm: %+v", c.Storm)
	}
	if c.Limits.MaxBodyBytes != 20000 || c.Limits.SendRate != 2.5 || !c.Debug.Pprof {
		t.Fatalf("limits/debug: %+v %v", c.Limits, c.Debug)
	}
	if !reflect.DeepEqual(c.Auth.Admins, []string{"alice", "bob"}) || !reflect.DeepEqual(c.WebSocket.AllowedOrigins, []string{"a.example", "b.example"}) {
		t.Fatalf("lists: %q %q", c.Auth.Admins, c.WebSocket.AllowedOrigins)
	}
	if len(c.Webhooks) != 1 || c.Webhooks[0].URL != "https://h.example/x" || c.Webhooks[0].Secret != "s" {
		t.Fatalf("webhooks: %+v", c.Webhooks)
	}
}

// TestEnvErrors: a variable naming no key, or a value of the wrong type, is
// an error naming the variable.
func TestEnvErrors(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"IMSERVER_STORM_TRESHOLD=5", "IMSERVER_STORM_TRESHOLD sets no config key"},
		{"IMSERVER_STORM=5", "IMSERVER_STORM sets no config key"},
		{"IMSERVER_STORM_THRESHOLD=lots", "IMSERVER_STORM_THRESHOLD: storm.threshold"},
		{"IMSERVER_STORM_WINDOW=5 minutes", "IMSERVER_STORM_WINDOW"},
	} {
		_, err := loadConfigFrom("", []string{tc.env}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.env, err, tc.want)
		}
	}
	// The test and bench tools' own variables are not config keys.
	if _, err := loadConfigFrom("", []string{"IMSERVER_BENCH_SERVER_BIN=/x", "IMSERVER_TEST_X=1"}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestConfigPrecedence: flags > environment > file > defaults, each layer
// overriding the one below for the same key, and IMSERVER_CONFIG naming
// the file when --config is not given.
func TestConfigPrecedence(t *testing.T) {
	file := configFile(t, "addr: file:1\nstorm:\n  threshold: 30\n")
	other := configFile(t, "addr: other:1\n")
	for _, tc := range []struct {
		name  string
		path  string
		env   []string
		flags map[string]string
		addr  string
		thr   int
	}{
		{name: "defaults", addr: "127.0.0.1:8080", thr: 100},
		{name: "file over defaults", path: file, addr: "file:1", thr: 30},
		{name: "env over file", path: file, env: []string{"IMSERVER_ADDR=env:1"}, addr: "env:1", thr: 30},
		{name: "env over defaults", env: []string{"IMSERVER_STORM_THRESHOLD=8"}, addr: "127.0.0.1:8080", thr: 8},
		{name: "flag over env", path: file, env: []string{"IMSERVER_ADDR=env:1"}, flags: map[string]string{"addr": "flag:1"}, addr: "flag:1", thr: 30},
		{name: "flag over file", path: file, flags: map[string]string{"addr": "flag:1"}, addr: "flag:1", thr: 30},
		{name: "IMSERVER_CONFIG names the file", env: []string{"IMSERVER_CONFIG=" + file}, addr: "file:1", thr: 30},
		{name: "--config over IMSERVER_CONFIG", path: other, env: []string{"IMSERVER_CONFIG=" + file}, addr: "other:1", thr: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfigFrom(tc.path, tc.env, tc.flags)
			if err != nil {
				t.Fatal(err)
			}
			if c.Addr != tc.addr || c.Storm.Threshold != tc.thr {
				t.Fatalf("addr %q threshold %d, want %q %d", c.Addr, c.Storm.Threshold, tc.addr, tc.thr)
			}
		})
	}
	if _, err := loadConfigFrom("", []string{"IMSERVER_CONFIG=" + filepath.Join(t.TempDir(), "missing.yaml")}, nil); !os.IsNotExist(err) {
		t.Fatalf("missing IMSERVER_CONFIG file: %v", err)
	}
}

// TestExampleConfigLoads: config.example.yaml is valid and equals the
// defaults (it documents them).
func TestExampleConfigLoads(t *testing.T) {
	c, err := loadConfigFrom("config.example.yaml", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := yaml.Marshal(c)
	want, _ := yaml.Marshal(defaultConfig())
	if string(got) != string(want) {
		t.Fatalf("config.example.yaml differs from the defaults:\n%s\nwant\n%s", got, want)
	}
}

// TestRetentionDays: retention.days is read from the file and the
// environment; negative is refused; 0 (the default) keeps everything.
func TestRetentionDays(t *testing.T) {
	c, err := loadConfigFrom(configFile(t, "retention:\n  days: 30\n"), nil, nil)
	if err != nil || c.Retention.Days != 30 {
		t.Fatalf("days %d, %v", c.Retention.Days, err)
	}
	c, err = loadConfigFrom(configFile(t, ""), []string{"IMSERVER_RETENTION_DAYS=7"}, nil)
	if err != nil || c.Retention.Days != 7 {
		t.Fatalf("from the environment: days %d, %v", c.Retention.Days, err)
	}
	// Negative, past a hundred years (as a Duration, 213504 days wrapped
	// around to a cutoff of minutes ago and deleted the history), or not
	// a whole number: refused.
	for body, want := range map[string]string{
		"retention:\n  days: -1\n":     "retention.days must be 0",
		"retention:\n  days: 213504\n": "retention.days must be 0",
		"retention:\n  days: 1.5\n":    "not a whole number of days",
	} {
		if _, err := loadConfigFrom(configFile(t, body), nil, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", body, err, want)
		}
	}
	if _, err := loadConfigFrom(configFile(t, ""), []string{"IMSERVER_RETENTION_DAYS=1.5"}, nil); err == nil {
		t.Error("IMSERVER_RETENTION_DAYS=1.5 was taken")
	}
	if defaultConfig().Retention.Days != 0 {
		t.Fatal("retention is on by default")
	}
}

// TestConfigRefusesValuesNobodyTakes: values a setting cannot take are
// refused at start, naming the key, instead of being replaced by a
// default further down.
func TestConfigRefusesValuesNobodyTakes(t *testing.T) {
	for body, key := range map[string]string{
		"log:\n  level: verbose\n":    "log.level",
		"log:\n  format: xml\n":       "log.format",
		"limits:\n  send_rate: 0\n":   "limits.send_rate",
		"limits:\n  send_rate: -1\n":  "limits.send_rate",
		"limits:\n  send_burst: 0\n":  "limits.send_burst",
		"sqlite:\n  batch_size: -5\n": "sqlite.batch_size",
		"sqlite:\n  readers: -1\n":    "sqlite.readers",
	} {
		if _, err := loadConfigFrom(configFile(t, body), nil, nil); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: %v, want a refusal naming %s", body, err, key)
		}
	}
	for _, body := range []string{"log:\n  level: DEBUG\n  format: JSON\n", "log:\n  level: warn\n"} {
		if _, err := loadConfigFrom(configFile(t, body), nil, nil); err != nil {
			t.Errorf("%q refused: %v", body, err)
		}
	}
}
