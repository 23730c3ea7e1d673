package api

import "github.com/gofiber/fiber/v2"

// registerV1 registers every /api/v1 route; each area adds its line here.
func (s *Server) registerV1(r fiber.Router) {
	s.registerTokens(r)
	s.registerKnowledgeBase(r)
	s.registerPlanner(r)
	s.registerTracker(r)
	s.registerTenancy(r)
	s.registerGateway(r)
	s.registerScheduling(r)
}
