// A client of the live api typed by openapi-typescript from api/openapi.json
// (generated next to this file as ballet.d.ts), run by cmd/ballet's
// TestGeneratedTypeScriptClient against `ballet serve`. It type-checks
// (tsc, strict) only if the document's schemas make usable types, and it
// exits non-zero, naming the step, if a call does not answer as typed.
import createClient from "openapi-fetch";
import type { components, paths } from "./ballet.js";

type Event = components["schemas"]["Event"];

// A free-form payload takes any JSON object: this fails to compile if the
// schema has no additionalProperties (openapi-typescript then makes it
// Record<string, never>).
const sample: Event["payload"] = { title: "a title", fields: ["state"], count: 3 };
void sample;

const base = process.env.BALLET_URL;
const token = process.env.BALLET_TOKEN;
if (!base || !token) {
  throw new Error("BALLET_URL and BALLET_TOKEN must be set");
}
const api = createClient<paths>({ baseUrl: base + "/api/v1", headers: { Authorization: "Bearer " + token } });

function fail(step: string, detail: unknown): never {
  throw new Error(step + ": " + JSON.stringify(detail));
}

const orgs = await api.GET("/organizations");
if (!orgs.data) fail("list organizations", orgs.error);
const org = orgs.data.items?.[0];
if (!org) fail("list organizations", "none");

const projects = await api.GET("/organizations/{org}/projects", { params: { path: { org: org.key } } });
if (!projects.data) fail("list projects", projects.error);
const project = projects.data.items?.find((p) => p.key === "DEMO");
if (!project) fail("list projects", projects.data);

const created = await api.POST("/projects/{project}/items", {
  params: { path: { project: project.key } },
  body: { kind: "ticket", title: "Typed client ticket", acceptance_criteria: ["It is created"] },
});
if (!created.data) fail("create item", created.error);
const item = created.data;

const history = await api.GET("/items/{item}/history", { params: { path: { item: item.key } } });
if (!history.data) fail("item history", history.error);
const first = history.data.items?.[0];
if (!first) fail("item history", "no events");
// The payload is an open object: its fields read as unknown.
const title: unknown = first.payload["title"];

// A refusal is typed too: the error body of a 404.
const missing = await api.GET("/items/{item}", { params: { path: { item: "NOPE-1" } } });
if (missing.response.status !== 404 || !missing.error) fail("missing item", missing.response.status);

console.log(JSON.stringify({
  organization: org.key,
  project: project.key,
  item: item.key,
  event: first.type,
  payload_title: title,
  missing: missing.error.error,
}));
