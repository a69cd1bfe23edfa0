package main

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// envPrefix starts every environment variable that sets a config key: the
// key path upper-cased with dots turned into underscores (storm.threshold is
// IMSERVER_STORM_THRESHOLD). IMSERVER_CONFIG names the file.
const envPrefix = "IMSERVER_"

// envConfigFile names the config file when --config is not given.
const envConfigFile = envPrefix + "CONFIG"

// envReserved are IMSERVER_ prefixes that belong to the test and bench tools,
// not to the configuration; the typo check leaves them alone.
var envReserved = []string{envPrefix + "BENCH_", envPrefix + "TEST_"}

// configKeys lists every settable key of Config ("storm.threshold"), walked
// from the yaml tags, so a key added to the struct gets its variable without
// touching this file. Slices and maps are leaves (one key, YAML or comma
// list value).
func configKeys() []string {
	var keys []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			if f.Type.Kind() == reflect.Struct && f.Type.String() != "time.Duration" {
				walk(f.Type, prefix+name+".")
				continue
			}
			keys = append(keys, prefix+name)
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	sort.Strings(keys)
	return keys
}

// envName is the variable of a config key.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// configField finds the field of key in c.
func configField(c *Config, key string) (reflect.Value, bool) {
	v := reflect.ValueOf(c).Elem()
	for _, part := range strings.Split(key, ".") {
		found := false
		for i := range v.NumField() {
			if strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0] == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// setKey sets one key from its text form, as a variable or a flag gives it:
// strings are taken as they are, a list of strings may be a comma list
// ("alice,bob"), everything else is parsed as a YAML value of the field's
// type (numbers, booleans, durations in Go syntax such as 300ms, and YAML
// flow syntax for lists of objects).
func setKey(c *Config, key, value string) error {
	f, ok := configField(c, key)
	if !ok {
		return fmt.Errorf("unknown config key %q", key)
	}
	switch {
	case f.Kind() == reflect.String:
		f.SetString(value)
		return nil
	case f.Type() == reflect.TypeOf([]string(nil)) && !strings.HasPrefix(strings.TrimSpace(value), "["):
		var list []string
		for _, s := range strings.Split(value, ",") {
			if s = strings.TrimSpace(s); s != "" {
				list = append(list, s)
			}
		}
		f.Set(reflect.ValueOf(list))
		return nil
	}
	p := reflect.New(f.Type())
	if err := yaml.Unmarshal([]byte(value), p.Interface()); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	f.Set(p.Elem())
	return nil
}

// applyEnv sets the keys whose variables env (os.Environ form) holds and
// records them in set. An IMSERVER_ variable that names no key is an error:
// a typo must not silently leave a default in place.
func applyEnv(c *Config, env []string, set map[string]bool) error {
	byVar := map[string]string{}
	for _, k := range configKeys() {
		byVar[envName(k)] = k
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || name == envConfigFile || reserved(name) {
			continue
		}
		key, ok := byVar[name]
		if !ok {
			return fmt.Errorf("environment variable %s sets no config key (variables are %s + the key path upper-cased, dots as underscores, e.g. IMSERVER_STORM_THRESHOLD; see config.example.yaml)", name, envPrefix)
		}
		if err := setKey(c, key, value); err != nil {
			return fmt.Errorf("environment variable %s: %w", name, err)
		}
		set[key] = true
	}
	return nil
}

func reserved(name string) bool {
	for _, p := range envReserved {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// yamlKeys records in set every key path a YAML document gives a value.
func yamlKeys(n *yaml.Node, prefix string, set map[string]bool) {
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			yamlKeys(c, prefix, set)
		}
		return
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := prefix + n.Content[i].Value
		set[key] = true
		yamlKeys(n.Content[i+1], key+".", set)
	}
}
