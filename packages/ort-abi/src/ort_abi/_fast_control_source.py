"""C source of the step runner's control-flow steps (`_fast_control.py`), appended to `_fast_source.FAST_SOURCE`.

A control-flow step has no kernel (`impl` NULL) but an `ort_abi_fast_control`: its bodies are runs of steps of
the same table, whose values are entries of the same value table and whose outputs and workspace lie in the
node's planned workspace block. `fast_control_run` computes it:

- If: the condition (a described bool) picks a body; its steps run in order; each body output is copied into the
  If's planned output block (checked against the plan as a kernel's request is) and published.
- Loop: the trip count (int64) and condition (bool) inputs, each optional; the body's iteration number and
  condition inputs point at 16 bytes of the workspace written before every iteration, its carried inputs at the
  Loop's initial inputs, then at the Loop's output blocks, into which each iteration's carried outputs are copied.

Anything else (an input not described with its type, a body step that did not finish in C alone: it failed,
deferred to Python or left an output unanswered, a result that does not fit its block, or a run whose checks
watch every iteration, `run->checked`) returns 1, not started, with any status released: the host runs the node
in Python, which computes it again from its inputs (the steps are pure) and reports what failed as it always
does. Nothing the step wrote is published then.
"""

from __future__ import annotations

CONTROL_SOURCE = """
#define FAST_IF 1
#define FAST_LOOP 2
#define FAST_BOOL 9
#define FAST_INT64 7

/* a body's steps in order: 0 when each was computed and published in C alone, else 1 (its status released) */
static int fast_body_run(ort_abi_fast_run* run, const ort_abi_fast_step* first, int32_t count, OrtStatus** status) {
  int32_t k;
  for (k = 0; k < count; ++k) {
    int rc = ort_abi_fast_step_run(run, first + k, status);
    if (rc != 0 || run->deferred) {
      if (*status != NULL) FAST_RELEASE_STATUS(*status);
      *status = NULL;
      return 1;
    }
  }
  return 0;
}

static int fast_scalar_bool(const ort_abi_fast_value* v, int* out) {
  if (v->state != 1 || v->elem_type != FAST_BOOL || v->count < 1 || v->data == NULL) return 0;
  *out = ((const unsigned char*)v->data)[0] != 0;
  return 1;
}

static int fast_scalar_int64(const ort_abi_fast_value* v, int64_t* out) {
  if (v->state != 1 || v->elem_type != FAST_INT64 || v->count < 1 || v->data == NULL) return 0;
  memcpy(out, v->data, sizeof(int64_t));
  return 1;
}

/* `src` copied into planned output `o` when the plan holds it (as a kernel's request for that output would be
 * answered); `*dst` is its description there. 0: it does not fit (or is not described) */
static int fast_place(const ort_abi_fast_run* run, const ort_abi_fast_output* o, const ort_abi_fast_value* src,
                      ort_abi_fast_value* dst) {
  int64_t count = 0;
  if (src->state != 1 || src->elem_type != o->elem_type || src->rank < 0 || src->rank > FAST_RANK
      || !fast_output_fits(run, o, src->dims, (size_t)src->rank, &count) || count != src->count) return 0;
  *dst = *src;
  dst->writable = 0;
  dst->data = run->bases[o->buffer] + o->offset;
  if (count && dst->data != src->data) memmove(dst->data, src->data, (size_t)count * (size_t)o->item_size);
  return 1;
}

static void fast_publish(ort_abi_fast_run* run, const ort_abi_fast_step* s, const ort_abi_fast_value* placed) {
  int32_t j;
  for (j = 0; j < s->output_count; ++j) {
    if (s->outputs[j].value < 0) continue;
    run->values[s->outputs[j].value] = placed[j];
    run->planned_values += 1;
  }
}

static int fast_if_run(ort_abi_fast_run* run, const ort_abi_fast_step* s, OrtStatus** status) {
  const ort_abi_fast_control* k = s->control;
  ort_abi_fast_value placed[FAST_OUTPUTS];
  int cond = 0, b;
  int32_t j;
  if (s->input_count < 1 || s->inputs[0] < 0 || k->body_count != 2
      || !fast_scalar_bool(&run->values[s->inputs[0]], &cond)) return 1;
  b = cond ? 0 : 1;
  if (fast_body_run(run, (const ort_abi_fast_step*)k->bodies[b], k->counts[b], status)) return 1;
  for (j = 0; j < s->output_count; ++j) {
    if (s->outputs[j].value >= 0 && !fast_place(run, &s->outputs[j], &run->values[k->results[b][j]], &placed[j]))
      return 1;
  }
  fast_publish(run, s, placed);
  return 0;
}

static int fast_loop_run(ort_abi_fast_run* run, const ort_abi_fast_step* s, OrtStatus** status) {
  const ort_abi_fast_control* k = s->control;
  const ort_abi_fast_step* body = (const ort_abi_fast_step*)k->bodies[0];
  ort_abi_fast_value* values = run->values;
  ort_abi_fast_value placed[FAST_OUTPUTS];
  int32_t n = s->output_count, j;
  int64_t trips = INT64_MAX, i;
  int cond = 1;
  char* state;
  if (k->body_count != 1 || s->input_count != n + 2 || k->param_count != n + 2 || k->state_buffer < 0) return 1;
  if (s->inputs[0] >= 0 && !fast_scalar_int64(&values[s->inputs[0]], &trips)) return 1;
  if (s->inputs[1] >= 0 && !fast_scalar_bool(&values[s->inputs[1]], &cond)) return 1;
  for (j = 0; j < n; ++j) {
    if (s->inputs[2 + j] < 0 || values[s->inputs[2 + j]].state != 1 || s->outputs[j].value < 0) return 1;
  }
  state = run->bases[k->state_buffer] + k->state_offset;
  if (k->params[0] >= 0) {
    ort_abi_fast_value* v = &values[k->params[0]];
    v->state = 1; v->writable = 0; v->elem_type = FAST_INT64; v->rank = 0; v->count = 1; v->data = state;
  }
  if (k->params[1] >= 0) {
    ort_abi_fast_value* v = &values[k->params[1]];
    v->state = 1; v->writable = 0; v->elem_type = FAST_BOOL; v->rank = 0; v->count = 1; v->data = state + 8;
  }
  for (j = 0; j < n; ++j) {
    if (k->params[2 + j] >= 0) values[k->params[2 + j]] = values[s->inputs[2 + j]];
  }
  for (i = 0; i < trips && cond; ++i) {
    memcpy(state, &i, sizeof(int64_t));
    state[8] = (char)cond;
    if (fast_body_run(run, body, k->counts[0], status)) return 1;
    if (!fast_scalar_bool(&values[k->results[0][0]], &cond)) return 1;
    for (j = 0; j < n; ++j) {
      if (!fast_place(run, &s->outputs[j], &values[k->results[0][1 + j]], &placed[j])) return 1;
      if (k->params[2 + j] >= 0) values[k->params[2 + j]] = placed[j];
    }
  }
  if (i == 0) {
    for (j = 0; j < n; ++j) {
      if (!fast_place(run, &s->outputs[j], &values[s->inputs[2 + j]], &placed[j])) return 1;
    }
  }
  fast_publish(run, s, placed);
  return 0;
}

static int fast_control_run(ort_abi_fast_run* run, const ort_abi_fast_step* s, OrtStatus** status) {
  if (s->output_count > FAST_OUTPUTS) return 1;
  if (s->control->kind == FAST_IF) return fast_if_run(run, s, status);
  if (s->control->kind == FAST_LOOP) return fast_loop_run(run, s, status);
  return 1;
}
"""
