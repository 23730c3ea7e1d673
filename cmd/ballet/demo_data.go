package main

import (
	"time"

	"github.com/balletplanner/ballet/store"
)

// The demo: one organization, one project with a small but believable plan
// (an online bookshop), a published planner skill, a few knowledge entries
// and a human engineer with an API token. It fits the built-in fake model
// script (gateway/fakellm/demo.yaml), which lists runnable tickets, searches
// for "password reset" (nothing covers it yet: the project only has
// sign-in), reads the planner skill and proposes two tickets.
const (
	demoOrgKey      = "demo"
	demoOrgName     = "Demo Company"
	demoProjectKey  = "DEMO"
	demoProjectName = "Demo Shop"
	demoSubject     = "demo@example.com"
	demoSkillName   = "planner"
	demoTokenTTL    = 30 * 24 * time.Hour
)

const demoProjectDescription = `Demo Shop is a small online bookshop: a catalogue imported from the
supplier's feed, customer accounts with email and password sign-in, and a
checkout that takes card payments. The private beta opens to a few hundred
invited readers; the public launch follows once checkout is solid.`

// demoItem is one item of the demo plan; epic and milestone name other
// demo items by ref.
type demoItem struct {
	ref, kind, title, description string
	typ                           string
	epic, milestone               string
	state                         string
	criteria                      []string
}

// demoDependency is "from <typ> to" between two demo items, by ref.
type demoDependency struct{ from, typ, to string }

var demoItems = []demoItem{
	{ref: "beta", kind: store.KindMilestone, title: "Private beta",
		description: "Invited readers can sign up, browse the catalogue and find books. No payments yet: orders are placed by email."},
	{ref: "launch", kind: store.KindMilestone, title: "Public launch",
		description: "Anyone can sign up and buy: checkout with card payments and order emails."},

	{ref: "accounts", kind: store.KindEpic, title: "Accounts and sign-in", milestone: "beta",
		description: "Customer accounts: sign-up with email verification, sign-in with email and password, sessions, account settings and signing out."},
	{ref: "catalogue", kind: store.KindEpic, title: "Catalogue and search", milestone: "beta",
		description: "The book catalogue, imported nightly from the supplier's feed, with product pages and search by title and author."},
	{ref: "checkout", kind: store.KindEpic, title: "Checkout and payments", milestone: "launch",
		description: "Basket, card payments through the payment provider and order confirmation."},

	// Accounts and sign-in.
	{ref: "signup", kind: store.KindTicket, title: "Sign-up form with email verification", epic: "accounts", milestone: "beta",
		state: store.StateDone, description: "A sign-up form (name, email, password) that sends a verification link; the account is usable once verified.",
		criteria: []string{"An unverified account cannot sign in", "The verification link works once and expires after 24 hours"}},
	{ref: "signin", kind: store.KindTicket, title: "Sign in with email and password", epic: "accounts", milestone: "beta",
		state: store.StateDone, description: "The sign-in page and POST /auth/sign-in. Passwords are hashed with argon2id.",
		criteria: []string{"A wrong email and a wrong password get the same answer", "Passwords are stored as argon2id hashes only"}},
	{ref: "sessions", kind: store.KindTicket, title: "Session cookies with sliding expiry", epic: "accounts", milestone: "beta",
		state: store.StateInProgress, description: "Server-side sessions in Postgres behind an HttpOnly, SameSite=Lax cookie; a session expires after 14 days without use.",
		criteria: []string{"The cookie is HttpOnly, Secure and SameSite=Lax", "A session idle for 14 days is gone", "Signing in again rotates the session id"}},
	{ref: "throttle", kind: store.KindTicket, title: "Rate-limit failed sign-in attempts", epic: "accounts", milestone: "beta",
		state: store.StateReady, description: "Slow down credential stuffing: after 5 failed attempts for one email or 20 from one IP address within 15 minutes, answer 429 with Retry-After.",
		criteria: []string{"The sixth failed attempt for one email within 15 minutes gets 429 with Retry-After", "A successful sign-in clears the email's counter"}},
	{ref: "settings", kind: store.KindTicket, title: "Account settings page", epic: "accounts", milestone: "beta",
		state: store.StateReady, description: "Change name, email (re-verified) and password while signed in.",
		criteria: []string{"Changing the email sends a verification link to the new address", "Changing the password asks for the current one"}},
	{ref: "signout", kind: store.KindTicket, title: "Sign out from every device", epic: "accounts", milestone: "launch",
		state: store.StateBacklog, description: "A button in the account settings that ends every session of the account but the current one."},

	// Catalogue and search.
	{ref: "import", kind: store.KindTicket, title: "Import the book catalogue from the supplier feed", epic: "catalogue", milestone: "beta",
		state: store.StateDone, description: "A nightly job reads the supplier's ONIX feed and upserts books, authors, prices and stock.",
		criteria: []string{"A book missing from the feed is hidden, not deleted", "The import of 40 000 books finishes in under 10 minutes"}},
	{ref: "product", kind: store.KindTicket, title: "Product page with cover, price and stock", epic: "catalogue", milestone: "beta",
		state: store.StateReady, description: "One page per book: cover, title, authors, blurb, price and whether it ships today.",
		criteria: []string{"Out-of-stock books say when they are expected back", "The page has Open Graph tags for sharing"}},
	{ref: "search", kind: store.KindTicket, title: "Search the catalogue by title and author", epic: "catalogue", milestone: "beta",
		state: store.StateReady, description: "A search box on every page; results ranked by title, then author, then blurb.",
		criteria: []string{"Searching an author's surname finds their books", "Results come back in under 300 ms at p95"}},
	{ref: "suggest", kind: store.KindTicket, title: "Typo-tolerant search suggestions", epic: "catalogue", milestone: "launch",
		state: store.StateBacklog, description: "Suggest titles and authors as the customer types, forgiving one or two typos."},
	{ref: "covers", kind: store.KindTicket, title: "Cover images are blurry on high-DPI screens", epic: "catalogue", milestone: "beta",
		typ: "bug", state: store.StateReady, description: "Covers are served at 1x only; serve srcset with 2x images from the image service.",
		criteria: []string{"Covers are sharp on a 2x display", "Product pages load no more image bytes on a 1x display than today"}},

	// Checkout and payments.
	{ref: "provider", kind: store.KindTicket, title: "Spike: choose a payment provider", epic: "checkout", milestone: "launch",
		typ: "spike", state: store.StateDone, description: "Compare two providers on fees, 3-D Secure support and payout timing; write the decision down."},
	{ref: "basket", kind: store.KindTicket, title: "Shopping basket that survives sign-in", epic: "checkout", milestone: "launch",
		state: store.StateReady, description: "A basket kept for anonymous visitors and merged into the account's basket when they sign in.",
		criteria: []string{"Items added before signing in are still there after", "Merging never duplicates a book; quantities add up"}},
	{ref: "payments", kind: store.KindTicket, title: "Card payments through the payment provider", epic: "checkout", milestone: "launch",
		state: store.StateBacklog, description: "Hosted payment fields, 3-D Secure, and a webhook that marks the order paid.",
		criteria: []string{"A declined card leaves the basket untouched", "The webhook is idempotent"}},
	{ref: "confirmation", kind: store.KindTicket, title: "Order confirmation email", epic: "checkout", milestone: "launch",
		state: store.StateBacklog, description: "Send the order summary and the expected delivery date once the payment is confirmed."},
	{ref: "runbook", kind: store.KindTicket, title: "Write the checkout runbook", epic: "checkout", milestone: "launch",
		typ: "docs", state: store.StatePaused, description: "What to do when payments fail or the webhook backs up. Paused until card payments exist."},
	{ref: "giftwrap", kind: store.KindTicket, title: "Gift wrapping option", epic: "checkout", milestone: "launch",
		state: store.StateCancelled, description: "Dropped: the warehouse cannot wrap books."},
}

var demoDependencies = []demoDependency{
	{"signin", store.DependencyBlocks, "sessions"},
	{"signin", store.DependencyBlocks, "throttle"},
	{"sessions", store.DependencyBlocks, "settings"},
	{"sessions", store.DependencyBlocks, "signout"},
	{"import", store.DependencyBlocks, "product"},
	{"import", store.DependencyBlocks, "search"},
	{"search", store.DependencyBlocks, "suggest"},
	{"sessions", store.DependencyBlocks, "basket"},
	{"provider", store.DependencyBlocks, "payments"},
	{"basket", store.DependencyBlocks, "payments"},
	{"payments", store.DependencyBlocks, "confirmation"},
	{"payments", store.DependencyBlocks, "runbook"},
	{"product", store.DependencyRelates, "covers"},
}

const demoSkillDescription = "How we plan work in Demo Shop: ticket size, acceptance criteria, ordering with dependencies and what a changeset should look like."

const demoSkillBody = `---
name: planner
description: How we plan work in Demo Shop.
---

# Planning in Demo Shop

You help the team turn requests into a plan the tracker can run. You never
change the plan yourself: you propose a changeset and a human applies it.

## Before you propose anything

1. Look at what is runnable and what is in progress, so you know where the
   team is.
2. Search the project for the request's subject. If a ticket already covers
   it, say so and propose an update rather than a duplicate.
3. Check the knowledge base for decisions that constrain the work (sessions,
   payments, the supplier feed).

## Tickets

- One ticket is one reviewable change: at most a few days of work for one
  engineer. Split anything larger; split API and UI work into two tickets.
- The title says what changes, in the imperative: "Add a password reset
  endpoint", not "Password reset".
- The description says why and sketches how, in two or three sentences.
- Give two to four acceptance criteria, each one observable by a tester.
  Security-relevant work always has a criterion for the abuse case
  (enumeration, replay, brute force).
- Types: feature by default, bug for broken behaviour, spike for a
  time-boxed investigation whose outcome is a knowledge entry, docs for
  runbooks and guides.
- Put a ticket in the epic it belongs to; leave the milestone empty when
  unsure and say so in the summary.

## Ordering

- Use "blocks" only for real ordering: the UI that calls an endpoint is
  blocked by the endpoint; two tickets that merely touch the same area
  "relate".
- Never block a ticket on work that is done or cancelled.

## The changeset

- Keep it small: the tickets for one request, with their dependencies.
- The summary explains the plan in plain words: what each ticket is for and
  why the order. End by saying that nothing changes until a human applies it.
`

type demoKnowledge struct {
	kind, title, body string
	items             []string // refs
}

var demoKnowledgeEntries = []demoKnowledge{
	{kind: store.KnowledgeDecision, title: "Sessions live in Postgres, not in signed cookies",
		items: []string{"sessions"},
		body: `## Decision

Customer sessions are server-side rows in Postgres; the cookie holds only a
random session id.

## Why

- We must be able to sign a customer out everywhere (stolen laptop, changed
  password), which signed cookies cannot do without a revocation list.
- One more table is cheaper than running Redis for the beta.

## Consequences

- Every request reads one session row; the index on the id keeps it cheap.
- Expired sessions are deleted by the nightly job.`},
	{kind: store.KnowledgeDocument, title: "Demo Shop architecture overview",
		body: `# Demo Shop architecture

- **web**: server-rendered pages (Go, html/template) behind the CDN.
- **api**: JSON endpoints under /api for the basket and search-as-you-type.
- **importer**: the nightly job that reads the supplier's ONIX feed.
- **Postgres**: books, accounts, sessions, baskets, orders.
- **email**: transactional email through the provider's SMTP relay; every
  message is rendered from a template in /templates/email.

Authentication is email and password (argon2id); sessions are server-side
(see the decision on sessions).`},
	{kind: store.KnowledgeNote, title: "Support inbox: customers cannot recover a forgotten password",
		items: []string{"signin"},
		body: `Beta readers who forget their password write to support, and support
resets it by hand in the database. That was fine for twenty people; with the
beta growing it is a dozen emails a week.

We need self-service recovery by email before the public launch. Whatever we
build must not reveal whether an address has an account.`},
	{kind: store.KnowledgeDebt, title: "The catalogue importer does not retry a failed feed download",
		items: []string{"import"},
		body: `When the supplier's server times out, the nightly import logs an error and
stops; the catalogue is then a day stale until someone re-runs it by hand.
Add retries with backoff, and an alert when two imports in a row fail.`},
}
