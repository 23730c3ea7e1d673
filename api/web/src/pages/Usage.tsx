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

/** Bars draws a row per key; href, when it gives one, links the row. Its
 * widths are shares of the chart's, so that it fits any screen: each row's
 * label on a line of its own, the bars under it, then their sum. */
function Bars(props: { rows: UsageRow[]; href?: (key: string) => string | undefined }) {
  if (props.rows.length === 0) return <p class="empty">No usage.</p>;
  const max = Math.max(1, ...props.rows.map((r) => r.input_tokens + r.output_tokens));
  const h = 44;
  const span = 78; // the longest bar's share of the width, in %: the rest holds its sum
  return (
    <svg class="chart" role={props.href ? "group" : "img"} height={props.rows.length * h} aria-label="Tokens: input and output">
      {props.rows.map((r, i) => {
        const iw = (span * r.input_tokens) / max;
        const ow = (span * r.output_tokens) / max;
        const y = i * h;
        const to = props.href?.(r.key);
        const label = (
          <text x="0" y={y + 14} class="label">
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
            <rect x="0" y={y + 20} width={`${iw}%`} height={16} class="in" />
            <rect x={`${iw}%`} y={y + 20} width={`${ow}%`} height={16} class="out" />
            <text x={`${iw + ow}%`} dx="6" y={y + 33} class="value">
              {(r.input_tokens + r.output_tokens).toLocaleString()}
            </text>
          </g>
        );
      })}
    </svg>
  );
}
