// REST access to /api/v1 with the signed-in token.

const tokenKey = "ballet.token";

/** The token of this tab (session storage), or "" in local mode. */
export function token(): string {
  return sessionStorage.getItem(tokenKey) ?? "";
}

export function setToken(t: string) {
  if (t) sessionStorage.setItem(tokenKey, t);
  else sessionStorage.removeItem(tokenKey);
}

/** ApiError is a REST error: its status, code and message (SPEC §10). */
export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
    public details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = "Bearer " + t;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch("/api/v1" + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : undefined;
  if (!res.ok) {
    throw new ApiError(res.status, data?.error ?? "error", data?.message ?? res.statusText, data?.details);
  }
  return data as T;
}

export const get = <T>(path: string) => api<T>("GET", path);
export const post = <T>(path: string, body?: unknown) => api<T>("POST", path, body ?? {});

export interface Page<T> {
  items: T[];
}

export interface Organization {
  id: string;
  key: string;
  name: string;
}

export interface Project {
  id: string;
  key: string;
  name: string;
  description?: string;
}

export interface Session {
  id: string;
  project: string;
  title: string;
  created_by: string;
  created_at: string;
  updated_at: string;
  running: boolean;
}

export interface Item {
  id: string;
  key: string;
  kind: string;
  title: string;
  description: string;
  state: string;
  type?: string;
  acceptance_criteria: string[];
  version: number;
  epic: string | null;
  milestone: string | null;
}

export interface Dependency {
  id: string;
  from: string;
  to: string;
  type: string;
}

export interface Operation {
  kind: string;
  ref?: string;
  create?: Partial<Item> & { kind: string; title: string };
  update?: Partial<Item> & { item: string; version?: number };
  dependency?: { from: string; to: string; type: string };
}

export interface Changeset {
  id: string;
  project: string;
  title: string;
  summary?: string;
  status: string;
  operations: Operation[];
  results: { item?: string; version?: number; dependency?: string }[] | null;
  applied_operations: number[] | null;
  proposed_by: { kind: string; subject: string; acting_for?: string };
  session_id?: string;
  created_at: string;
  updated_at: string;
}

export interface KnowledgeEntry {
  id: string;
  title: string;
  body: string;
  tags?: string[];
  projects?: string[];
  updated_at: string;
}

export interface KnowledgeHit {
  id: string;
  kind: string;
  title: string;
  projects?: string[];
  snippet: string;
  updated_at: string;
}

export interface UsageRow {
  key: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
}

export interface UsageReport {
  project: string;
  group_by: string;
  since: string;
  items: UsageRow[];
  total: Omit<UsageRow, "key">;
}

/** projectsOfAll lists every project the caller can read, by organization. */
export async function projectsOfAll(): Promise<{ org: Organization; projects: Project[] }[]> {
  const orgs = await get<Page<Organization>>("/organizations");
  return Promise.all(
    orgs.items.map(async (org) => ({
      org,
      projects: (await get<Page<Project>>(`/organizations/${encodeURIComponent(org.key)}/projects`)).items,
    })),
  );
}
