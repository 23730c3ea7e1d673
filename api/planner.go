package api

import (
	"context"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

func (s *Server) registerPlanner(r fiber.Router) {
	if s.planner == nil {
		return
	}
	r.Post("/projects/:project/planner/sessions", s.createSession)
	r.Get("/projects/:project/planner/sessions", s.listSessions)
	r.Get("/planner/sessions/:session", s.getSession)
	r.Post("/planner/sessions/:session/messages", s.sendMessage)
	r.Post("/planner/sessions/:session/cancel", s.cancelTurns)
	r.Get("/planner/sessions/:session/outputs", s.listOutputs)
	r.Post("/planner/sessions/:session/stream-tickets", s.mintStreamTicket)
	r.Get("/planner/sessions/:session/turns/:turn", s.getTurn)
}

func caller(c *fiber.Ctx) store.Caller { return store.HumanCaller(principal(c)) }

type createSessionRequest struct {
	Title string `json:"title"`
}

func (s *Server) createSession(c *fiber.Ctx) error {
	var req createSessionRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	sess, err := s.db.CreateSession(c.UserContext(), caller(c), c.Params("project"), req.Title)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(sess)
}

func (s *Server) listSessions(c *fiber.Ctx) error {
	list, err := s.db.ListSessions(c.UserContext(), caller(c), c.Params("project"), c.QueryInt("limit", 200))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": list})
}

func (s *Server) getSession(c *fiber.Ctx) error {
	sess, err := s.db.GetSession(c.UserContext(), caller(c), c.Params("session"))
	if err != nil {
		return err
	}
	if sess.Messages == nil {
		sess.Messages = []store.Message{}
	}
	return c.JSON(sess)
}

type sendRequest struct {
	Text string `json:"text"`
	// Turn is an optional client-chosen turn id, an idempotency key of 1
	// to 255 printable ASCII characters: a retry with the same id in the
	// same session is not a second turn.
	Turn *string `json:"turn"`
	// Priority is interactive (the default) or batch: inside its
	// organization's share, interactive turns start first.
	Priority string `json:"priority"`
	// Multitask is what to do while a turn of the session is open:
	// enqueue (the default), reject or interrupt.
	Multitask string `json:"multitask"`
	// Webhook is an optional URL POSTed once the turn ends (turn.done),
	// signed with the Standard Webhooks scheme; WebhookPolicy checks it.
	Webhook *string `json:"webhook"`
}

// sendMessage is the REST twin of planner.send: 202 {seq, turn, position}.
func (s *Server) sendMessage(c *fiber.Ctx) error {
	var req sendRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	turn, err := clientTurn(req.Turn)
	if err != nil {
		return err
	}
	hook, err := s.checkWebhook(c.UserContext(), req.Webhook)
	if err != nil {
		return err
	}
	// The client's traceparent and tracestate, when it sent them and
	// tracing is on, make the turn's spans part of its trace.
	res, err := s.planner.Submit(restTrace(c), caller(c), store.SendRequest{Session: c.Params("session"),
		Text: req.Text, Turn: turn, Priority: req.Priority, Multitask: req.Multitask, Webhook: hook})
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusAccepted).JSON(res)
}

// clientTurn is a send's client turn id: none when left out, else one
// that store.CheckClientTurn accepts (an empty one is refused, not taken
// for none).
func clientTurn(turn *string) (string, error) {
	if turn == nil {
		return "", nil
	}
	return *turn, store.CheckClientTurn(*turn)
}

// WebhookPolicy decides which webhook URL a send may name: nil, else an
// invalid_argument error that says why. The *webhooks.Policy of
// webhooks.allowed_hosts is one.
type WebhookPolicy interface {
	CheckWebhook(ctx context.Context, raw string) error
}

// checkWebhook is a send's webhook: none when left out, else one the
// server's policy allows (an empty one is refused, not taken for none).
func (s *Server) checkWebhook(ctx context.Context, raw *string) (string, error) {
	switch {
	case raw == nil:
		return "", nil
	case s.webhooks == nil:
		return "", store.Errorf(store.CodeInvalid, "webhook: this server allows no webhooks (webhooks.allowed_hosts is empty)")
	}
	return *raw, s.webhooks.CheckWebhook(ctx, *raw)
}

type cancelRequest struct {
	Turn string `json:"turn"`
}

// cancelTurns cancels one turn, or every open turn of the session.
func (s *Server) cancelTurns(c *fiber.Ctx) error {
	var req cancelRequest
	if err := decodeOptional(c, &req); err != nil {
		return err
	}
	res, err := s.planner.Cancel(restTrace(c), caller(c), c.Params("session"), req.Turn)
	if err != nil {
		return err
	}
	cancelled := []string{}
	for _, o := range res.Outputs {
		if o.Type == store.OutputDone {
			cancelled = append(cancelled, o.Turn)
		}
	}
	stopping := res.Running
	if stopping == nil {
		stopping = []string{}
	}
	return c.JSON(fiber.Map{"cancelled": cancelled, "stopping": stopping})
}

// listOutputs replays stored outputs after from_cursor, in cursor order;
// with Accept: text/event-stream it streams them (planner_sse.go).
func (s *Server) listOutputs(c *fiber.Ctx) error {
	if wantsEventStream(c) {
		return s.streamOutputs(c)
	}
	from, err := strconv.ParseInt(c.Query("from_cursor", "0"), 10, 64)
	if err != nil || from < 0 {
		return store.Errorf(store.CodeInvalid, "from_cursor: must be a non-negative integer")
	}
	limit := c.QueryInt("limit", 1000)
	if limit < 1 || limit > 1000 {
		return store.Errorf(store.CodeInvalid, "limit: must be 1-1000")
	}
	outs, err := s.db.ListOutputs(c.UserContext(), caller(c), c.Params("session"), from, limit)
	if err != nil {
		return err
	}
	if outs == nil {
		outs = []store.Output{}
	}
	return c.JSON(fiber.Map{"items": outs})
}
