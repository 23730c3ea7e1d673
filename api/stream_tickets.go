package api

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store"
)

// StreamTicketTTL is how long a stream ticket may wait for its connection.
const StreamTicketTTL = time.Minute

// streamTicketPrefix starts every stream ticket, so that one is told from
// an API token at a glance (and never taken for one).
const streamTicketPrefix = "bst_"

// streamTicketLocal is the request local holding a redeemed ticket's
// token, for the stream's rechecks.
const streamTicketLocal = "ballet.stream_ticket_token"

// streamTicket is what a ticket stands for: one event stream of one
// session, as the subject whose token minted it.
type streamTicket struct {
	Session string `json:"session"`
	Subject string `json:"subject"`
	// Token is the minting request's bearer token ("" in auth.mode local),
	// so that the stream's rechecks check it as a header stream's do.
	Token string `json:"token"`
}

// streamTicketKey is the Redis key of a ticket, and the AES key its record
// is sealed with: both derived from the ticket, so that Redis holds neither
// the ticket nor, readable, the token.
func (s *Server) streamTicketKey(ticket string) (key string, aead cipher.AEAD, err error) {
	id := sha256.Sum256([]byte("ballet stream ticket id\x00" + ticket))
	k := sha256.Sum256([]byte("ballet stream ticket key\x00" + ticket))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return "", nil, err
	}
	aead, err = cipher.NewGCM(block)
	if err != nil {
		return "", nil, err
	}
	return s.redisNamespace + "ballet:stream-ticket:" + hex.EncodeToString(id[:]), aead, nil
}

// mintStreamTicket answers POST /planner/sessions/:session/stream-tickets
// (tracker.read): a ticket for one event stream of the session, to open
// within StreamTicketTTL, in place of the Authorization header an
// EventSource cannot send.
func (s *Server) mintStreamTicket(c *fiber.Ctx) error {
	if s.rdb == nil {
		return store.Errorf(store.CodeUnavailable, "stream tickets are not served by this api process")
	}
	if err := decodeOptional(c, &struct{}{}); err != nil {
		return err
	}
	p := principal(c)
	sess, err := s.db.WatchSession(c.UserContext(), caller(c), c.Params("session"))
	if err != nil {
		return err
	}
	token, _ := bearer(c.Get(fiber.HeaderAuthorization))
	ticket := streamTicketPrefix + rand.Text() + rand.Text()
	key, aead, err := s.streamTicketKey(ticket)
	if err != nil {
		return fmt.Errorf("api: stream ticket: %w", err)
	}
	plain, err := json.Marshal(streamTicket{Session: sess.ID, Subject: p.Subject, Token: token})
	if err != nil {
		return fmt.Errorf("api: stream ticket: %w", err)
	}
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	sealed := aead.Seal(nonce, nonce, plain, []byte(key))
	expires := time.Now().Add(StreamTicketTTL)
	if err := s.rdb.Set(c.UserContext(), key, sealed, StreamTicketTTL).Err(); err != nil {
		return store.Errorf(store.CodeUnavailable, "store the stream ticket: %v", err)
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"ticket": ticket, "expires_at": expires.UTC().Format(time.RFC3339),
		"url": "/api/v1/planner/sessions/" + sess.ID + "/outputs?ticket=" + ticket})
}

// redeemStreamTicket takes a ticket once: the record it stands for, or an
// unauthenticated error when it is unknown, used or expired.
func (s *Server) redeemStreamTicket(ctx context.Context, ticket string) (streamTicket, error) {
	gone := store.Errorf(store.CodeUnauthenticated,
		"stream ticket unknown, used or expired: a ticket opens one stream within %s of POST …/stream-tickets", StreamTicketTTL)
	if !strings.HasPrefix(ticket, streamTicketPrefix) || len(ticket) > 128 {
		return streamTicket{}, gone
	}
	key, aead, err := s.streamTicketKey(ticket)
	if err != nil {
		return streamTicket{}, fmt.Errorf("api: stream ticket: %w", err)
	}
	sealed, err := s.rdb.GetDel(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return streamTicket{}, gone
	}
	if err != nil {
		return streamTicket{}, store.Errorf(store.CodeUnavailable, "read the stream ticket: %v", err)
	}
	n := aead.NonceSize()
	if len(sealed) < n {
		return streamTicket{}, gone
	}
	plain, err := aead.Open(nil, sealed[:n], sealed[n:], []byte(key))
	if err != nil {
		return streamTicket{}, gone
	}
	var t streamTicket
	if err := json.Unmarshal(plain, &t); err != nil {
		return streamTicket{}, gone
	}
	return t, nil
}

// ticketStream serves GET …/outputs?ticket=: the event stream a ticket
// opens, as the subject who minted it, without an Authorization header.
// A request without a ticket goes on to the authenticated route.
func (s *Server) ticketStream(c *fiber.Ctx) error {
	ticket := c.Query("ticket")
	if ticket == "" {
		return c.Next()
	}
	if err := s.checkURL(c); err != nil {
		return err
	}
	if c.Get(fiber.HeaderAuthorization) != "" {
		return store.Errorf(store.CodeInvalid, "ticket: send either a stream ticket or an Authorization header, not both")
	}
	if !wantsEventStream(c) {
		return store.Errorf(store.CodeInvalid, "ticket: a stream ticket opens only the event stream (Accept: text/event-stream)")
	}
	t, err := s.redeemStreamTicket(c.UserContext(), ticket)
	if err != nil {
		return err
	}
	if t.Session != c.Params("session") {
		return store.Errorf(store.CodeForbidden, "the stream ticket is for session %s, not %s", t.Session, c.Params("session"))
	}
	// The token is checked again, as a header stream's would be.
	p, err := s.tokenPrincipal(t.Token)(c.UserContext())
	if err != nil {
		return err
	}
	if p.Subject != t.Subject {
		return store.Errorf(store.CodeUnauthenticated, "the token that minted the stream ticket is no longer valid")
	}
	c.Locals(principalKey, p)
	c.Locals(streamTicketLocal, t.Token)
	return s.streamOutputs(c)
}

// streamToken is the token a stream rechecks: the Authorization header's,
// or the one its ticket was minted with.
func streamToken(c *fiber.Ctx) string {
	if t, ok := c.Locals(streamTicketLocal).(string); ok {
		return t
	}
	token, _ := bearer(c.Get(fiber.HeaderAuthorization))
	return token
}
