package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// apiClient speaks the HTTP half of PROTOCOL.md. Every error it returns names
// the request and what came back, so a deviation from the contract can be
// reported as is rather than worked around.
type apiClient struct {
	base string // http://host:port, no trailing slash
	hc   *http.Client
	// metricsToken is the bearer token GET /metrics is read with.
	metricsToken string
}

// apiClient is a client of the server at base, reading its /metrics with
// the token o names (--metrics-token).
func (o Options) apiClient(base string) *apiClient {
	a := newAPIClient(base)
	a.metricsToken = o.MetricsToken
	return a
}

// signInAdmin makes a read /metrics as benchAdmin, which the bench's own
// server configuration names an admin: registered on a fresh database,
// logged in on one that has it (a growth history reused).
func (a *apiClient) signInAdmin(ctx context.Context) error {
	_, tok, err := a.register(ctx, benchAdmin, benchPassword)
	if err != nil {
		var login struct {
			Token string `json:"token"`
		}
		if lerr := a.do(ctx, "POST", "/api/v1/auth/login", "", map[string]string{"username": benchAdmin, "password": benchPassword}, &login, 0); lerr != nil {
			return fmt.Errorf("the bench's admin account: %w; %w", err, lerr)
		}
		tok = login.Token
	}
	a.metricsToken = tok
	return nil
}

func newAPIClient(base string) *apiClient {
	tr := &http.Transport{
		Proxy:               nil, // the bench talks to the server directly, never through a proxy from the environment
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}
	return &apiClient{base: strings.TrimRight(base, "/"), hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// apiError is a non-2xx answer, or a 2xx answer that does not match the contract.
type apiError struct {
	Method, Path string
	Status       int
	Code         string // error.code from the body, if any
	Body         string // the body as received (truncated)
	Reason       string // set when the answer breaks the contract
}

func (e *apiError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s %s: %s (status %d, body %s)", e.Method, e.Path, e.Reason, e.Status, e.Body)
	}
	return fmt.Sprintf("%s %s: status %d, code %q, body %s", e.Method, e.Path, e.Status, e.Code, e.Body)
}

func truncate(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// do sends in as JSON and decodes a 2xx answer into out. wantStatus, when not
// zero, is the only status the contract allows for success.
func (a *apiClient) do(ctx context.Context, method, path, token string, in, out any, wantStatus int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading body: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &apiError{Method: method, Path: path, Status: resp.StatusCode, Body: truncate(raw, 300)}
		var eb struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &eb) == nil {
			e.Code = eb.Error.Code
		}
		return e
	}
	if wantStatus != 0 && resp.StatusCode != wantStatus {
		return &apiError{Method: method, Path: path, Status: resp.StatusCode, Body: truncate(raw, 300),
			Reason: fmt.Sprintf("PROTOCOL.md says %d", wantStatus)}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return &apiError{Method: method, Path: path, Status: resp.StatusCode, Body: truncate(raw, 300),
				Reason: "answer is not the JSON object PROTOCOL.md describes: " + err.Error()}
		}
	}
	return nil
}

func (a *apiClient) contractError(method, path string, status int, v any, reason string) error {
	b, _ := json.Marshal(v)
	return &apiError{Method: method, Path: path, Status: status, Body: truncate(b, 300), Reason: reason}
}

type wireUser struct {
	ID          string `json:"id"`
	Username    string `json:"username"`
	DisplayName string `json:"display_name"`
}

// register creates an account: POST /api/v1/auth/register → 201 {user, token}.
func (a *apiClient) register(ctx context.Context, username, password string) (wireUser, string, error) {
	var out struct {
		User  wireUser `json:"user"`
		Token string   `json:"token"`
	}
	const path = "/api/v1/auth/register"
	err := a.do(ctx, "POST", path, "", map[string]string{"username": username, "password": password}, &out, http.StatusCreated)
	if err != nil {
		return wireUser{}, "", err
	}
	if out.User.ID == "" || out.Token == "" {
		return wireUser{}, "", a.contractError("POST", path, 201, out, "answer lacks user.id or token")
	}
	return out.User, out.Token, nil
}

// maxIDsPerRequest keeps member lists well under limits.max_request_bytes
// (64 KiB) whatever the length of the server's ids.
const maxIDsPerRequest = 500

// createGroup creates a group owned by the token's user; members beyond the
// first request are added with POST /conversations/{id}/members.
func (a *apiClient) createGroup(ctx context.Context, token, name string, memberIDs []string) (string, error) {
	first := memberIDs
	if len(first) > maxIDsPerRequest {
		first = first[:maxIDsPerRequest]
	}
	var out struct {
		Conversation struct {
			ID           string `json:"id"`
			Kind         string `json:"kind"`
			MembersCount int    `json:"members_count"`
		} `json:"conversation"`
	}
	const path = "/api/v1/groups"
	if err := a.do(ctx, "POST", path, token, map[string]any{"name": name, "member_ids": nonNil(first)}, &out, http.StatusCreated); err != nil {
		return "", err
	}
	if out.Conversation.ID == "" {
		return "", a.contractError("POST", path, 201, out, "answer lacks conversation.id")
	}
	for rest := memberIDs[len(first):]; len(rest) > 0; {
		n := min(len(rest), maxIDsPerRequest)
		if err := a.addMembers(ctx, token, out.Conversation.ID, rest[:n]); err != nil {
			return "", err
		}
		rest = rest[n:]
	}
	return out.Conversation.ID, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (a *apiClient) addMembers(ctx context.Context, token, conv string, ids []string) error {
	return a.do(ctx, "POST", "/api/v1/conversations/"+url.PathEscape(conv)+"/members", token,
		map[string]any{"user_ids": ids}, nil, http.StatusOK)
}

// messagePage is the answer of GET .../messages and of the `sync` frame.
type messagePage struct {
	Messages  []wireMessage `json:"messages"`
	MaxSeq    int64         `json:"max_seq"`
	Completed *bool         `json:"completed"`
}

// messagesAfter pulls one page: GET /api/v1/conversations/{id}/messages?after_seq=N&limit=L.
func (a *apiClient) messagesAfter(ctx context.Context, token, conv string, after int64, limit int) (messagePage, error) {
	path := "/api/v1/conversations/" + url.PathEscape(conv) + "/messages?after_seq=" +
		strconv.FormatInt(after, 10) + "&limit=" + strconv.Itoa(limit)
	var p messagePage
	if err := a.do(ctx, "GET", path, token, nil, &p, http.StatusOK); err != nil {
		return p, err
	}
	if p.Completed == nil || p.Messages == nil {
		return p, a.contractError("GET", path, 200, p, "answer lacks messages (array) or completed")
	}
	return p, nil
}

// ack posts a cumulative receive ack: POST /api/v1/conversations/{id}/ack.
func (a *apiClient) ack(ctx context.Context, token, conv string, seq int64) error {
	return a.do(ctx, "POST", "/api/v1/conversations/"+url.PathEscape(conv)+"/ack", token,
		map[string]int64{"seq": seq}, nil, http.StatusNoContent)
}

// healthy reports whether GET /healthz answers 200.
func (a *apiClient) healthy(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, "GET", a.base+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// wsURL is the WebSocket endpoint for a token.
func (a *apiClient) wsURL(token string) string {
	u := a.base
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	return u + "/api/v1/ws?token=" + url.QueryEscape(token)
}
