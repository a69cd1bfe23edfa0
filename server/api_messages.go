package server

import (
	"net/http"

	"github.com/imserver/imserver/chat"
)

type seqBody struct {
	Seq *int64 `json:"seq"`
}

func (s *Server) decodeSeq(w http.ResponseWriter, r *http.Request) (int64, error) {
	var b seqBody
	if err := s.decode(w, r, &b); err != nil {
		return 0, err
	}
	if b.Seq == nil || *b.Seq < 0 {
		return 0, chat.Errorf(chat.EBadRequest, "seq must be an integer >= 0")
	}
	return *b.Seq, nil
}

func (s *Server) handleAck(w http.ResponseWriter, r *http.Request) {
	seq, err := s.decodeSeq(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.noContent(w, r, s.chat.Ack(r.Context(), userOf(r).ID, r.PathValue("id"), seq))
}

func (s *Server) handleRead(w http.ResponseWriter, r *http.Request) {
	seq, err := s.decodeSeq(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.noContent(w, r, s.chat.Read(r.Context(), userOf(r).ID, "", r.PathValue("id"), seq))
}

func (s *Server) handleSend(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ClientMsgID string   `json:"client_msg_id"`
		Body        *string  `json:"body"`
		Kind        string   `json:"kind"`
		Target      *int64   `json:"target"`
		Emoji       string   `json:"emoji"`
		On          *bool    `json:"on"`
		ReplyTo     *int64   `json:"reply_to"`
		Attachments []string `json:"attachments"`
	}
	if err := s.decode(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if body.Body == nil && !bodyOptional(body.Kind) && len(body.Attachments) == 0 {
		s.writeError(w, r, chat.Errorf(chat.EBadRequest, "body is required"))
		return
	}
	m, dup, err := s.chat.Send(r.Context(), userOf(r).ID,
		sendRequest(r.PathValue("id"), body.ClientMsgID, body.Body, body.Kind, body.Target, body.Emoji, body.On, body.ReplyTo, body.Attachments))
	if err != nil {
		if chat.ErrorCode(err) == chat.ERateLimited {
			s.metrics.RateLimited.Inc()
		}
		s.writeError(w, r, err)
		return
	}
	status := http.StatusCreated
	if dup {
		status = http.StatusOK
	}
	writeJSON(w, status, map[string]any{"message": m, "duplicate": dup})
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	var q chat.PageQuery
	var err error
	if q.After, err = queryInt(r, "after_seq", 0); err != nil {
		s.writeError(w, r, err)
		return
	}
	if r.URL.Query().Has("before_seq") {
		q.Backward = true
		if q.Before, err = queryInt(r, "before_seq", 0); err != nil {
			s.writeError(w, r, err)
			return
		}
		if r.URL.Query().Has("after_seq") {
			s.writeError(w, r, chat.Errorf(chat.EBadRequest, "give after_seq or before_seq, not both"))
			return
		}
	}
	if q.Limit, err = queryLimit(r, chat.MaxPageLimit); err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.chat.Messages(r.Context(), userOf(r).ID, r.PathValue("id"), q)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}
