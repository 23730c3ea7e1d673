package kubernetes

import (
	"slices"
	"strings"
)

// otelVariables are the OpenTelemetry variables a Ballet process reads
// (internal/tracing and the OTLP exporters of the Go SDK): a pod may set
// them; a misspelt one would be ignored silently, so it is refused.
var otelVariables = []string{
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_PROPAGATORS",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
	"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
	"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
	"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
	"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
}

// checkTracing: each Deployment names its process in traces
// (OTEL_SERVICE_NAME ballet-<component>, as the process would name
// itself), so that the spans of a turn say which process made them
// whatever OTEL_RESOURCE_ATTRIBUTES an operator adds; and none exports
// spans: the shipped kustomizations leave tracing off until the operator
// sets an endpoint (README.md, "Traces").
func (c *checker) checkTracing() {
	for _, d := range c.m.deployments {
		component := d.Spec.Template.Labels["app.kubernetes.io/component"]
		if len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		where := "Deployment " + d.Name
		env := c.environment(where, d.Spec.Template.Spec.Containers[0])
		if got, want := env["OTEL_SERVICE_NAME"].value, "ballet-"+component; got != want {
			c.errorf("%s: OTEL_SERVICE_NAME %q, want %q", where, got, want)
		}
		if on := tracingEndpoint(env); on != "" {
			c.errorf("%s: %s turns tracing on; the shipped kustomizations leave it to the operator", where, on)
		}
	}
}

// tracingEndpoint is what turns tracing on in a container's environment
// (internal/tracing.FromEnv): an OTLP endpoint, or the otlp exporter
// named; "" when tracing is off.
func tracingEndpoint(env map[string]envVar) string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := strings.TrimSpace(env[k].value); v != "" {
			return k + "=" + v
		}
	}
	if strings.EqualFold(strings.TrimSpace(env["OTEL_TRACES_EXPORTER"].value), "otlp") {
		return "OTEL_TRACES_EXPORTER=otlp"
	}
	return ""
}

func isOTelVariable(name string) bool { return slices.Contains(otelVariables, name) }
