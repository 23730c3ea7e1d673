// Token usage of a project by model, by session and by day, as SVG bars.
import { get, type UsageReport, type UsageRow } from "../api";
import { navigate } from "../router";
import { ErrorLine, useLoad } from "../ui";

export function UsagePage(props: { project: string }) {
  const load = (g: string) => get<UsageReport>(`/projects/${props.project}/usage?group_by=${g}`);
  const { data, error } = useLoad(() => Promise.all([load("day"), load("model"), load("session")]), [props.project]);
  return (
    <section>
      <h1>Usage (last 30 days)</h1>
      <ErrorLine error={error} />
      {data && (
        <>
          <p class="meta">
            {data[0].total.requests} model calls · {data[0].total.input_tokens.toLocaleString()} input and{" "}
            {data[0].total.output_tokens.toLocaleString()} output tokens
          </p>
          <p class="legend" aria-label="Legend">
            <span class="swatch in" aria-hidden="true" /> input tokens <span class="swatch out" aria-hidden="true" /> output tokens · the
            number is their sum
          </p>
          <h2>By day</h2>
          <Bars rows={data[0].items} />
          <h2>By model</h2>
          <Bars rows={data[1].items} />
          <h2>By session</h2>
          <Bars rows={data[2].items} href={(key) => (key.startsWith("planner:") ? `/projects/${props.project}/sessions/${key.slice(8)}` : undefined)} />
        </>
      )}
    </section>
  );
}

/** Bars draws a row per key; href, when it gives one, links the row. */
function Bars(props: { rows: UsageRow[]; href?: (key: string) => string | undefined }) {
  if (props.rows.length === 0) return <p class="empty">No usage.</p>;
  const max = Math.max(1, ...props.rows.map((r) => r.input_tokens + r.output_tokens));
  const h = 26;
  const w = 640;
  const lw = 220;
  return (
    <svg class="chart" role={props.href ? "group" : "img"} viewBox={`0 0 ${w} ${props.rows.length * h + 4}`} aria-label="Tokens: input and output">
      {props.rows.map((r, i) => {
        const iw = ((w - lw - 90) * r.input_tokens) / max;
        const ow = ((w - lw - 90) * r.output_tokens) / max;
        const y = i * h + 2;
        const to = props.href?.(r.key);
        const label = (
          <text x={lw - 8} y={y + 16} text-anchor="end" class="label">
            {r.key.startsWith("planner:") ? "session " + r.key.slice(8, 16) : r.key.length > 30 ? r.key.slice(0, 29) + "…" : r.key}
          </text>
        );
        return (
          <g key={r.key}>
            <title>{`${r.key}: ${r.input_tokens} input, ${r.output_tokens} output tokens, ${r.requests} calls`}</title>
            {to ? (
              <a
                href={to}
                class="row-link"
                onClick={(e) => {
                  e.preventDefault();
                  navigate(to);
                }}
              >
                {label}
              </a>
            ) : (
              label
            )}
            <rect x={lw} y={y + 3} width={iw} height={h - 8} class="in" />
            <rect x={lw + iw} y={y + 3} width={ow} height={h - 8} class="out" />
            <text x={lw + iw + ow + 6} y={y + 16} class="value">
              {(r.input_tokens + r.output_tokens).toLocaleString()}
            </text>
          </g>
        );
      })}
    </svg>
  );
}
