package server

import (
	"net/http"

	"github.com/imserver/imserver/chat"
)

type subscriptionJSON struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

func (s *Server) pushOff(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Push == nil {
		s.writeError(w, r, chat.Errorf(chat.ENotFound, "push notifications are off on this server"))
		return true
	}
	return false
}

func (s *Server) handlePushKey(w http.ResponseWriter, r *http.Request) {
	if s.pushOff(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"public_key": s.cfg.Push.PublicKey()})
}

func (s *Server) handleSubscribe(w http.ResponseWriter, r *http.Request) {
	if s.pushOff(w, r) {
		return
	}
	var req subscriptionJSON
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	sub := chat.PushSubscription{Endpoint: req.Endpoint, P256dh: req.Keys.P256dh, Auth: req.Keys.Auth}
	if err := checkSubscription(sub, s.cfg.PushAllowPrivate); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.chat.SubscribePush(r.Context(), userOf(r).ID, sub); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) handleUnsubscribe(w http.ResponseWriter, r *http.Request) {
	var req subscriptionJSON
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Endpoint == "" {
		s.writeError(w, r, chat.Errorf(chat.EBadRequest, "endpoint is required"))
		return
	}
	if err := s.chat.UnsubscribePush(r.Context(), userOf(r).ID, req.Endpoint); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
