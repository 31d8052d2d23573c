"""C source of the step runner's control-flow steps (`_fast_control.py`), appended to `_fast_source.FAST_SOURCE`.

A control-flow step has no kernel (`impl` NULL) but an `ort_abi_fast_control`: its bodies are runs of steps of
the same table, whose values are entries of the same value table and whose outputs and workspace lie in the
node's planned workspace block. `fast_control_run` computes it:

- If: the condition (a described bool) picks a body; its steps run in order; each body output is copied into the
  If's planned output block (checked against the plan as a kernel's request is) and published.
- Loop: the trip count (int64) and condition (bool) inputs, each optional; the body's iteration number and
  condition inputs point at 16 bytes of the workspace written before every iteration, its carried inputs at the
  Loop's initial inputs, then at the Loop's output blocks, into which each iteration's carried outputs are copied;
  each scan output is copied to its iteration's place in its output block (stacked along a new first axis).
- Scan: as many iterations as the scan inputs' first extent; the body's scan inputs are the slices of the Scan's
  inputs along that axis (from the end where reversed), its states carried as a Loop's, its scan outputs stacked
  (from the end where reversed).

Anything else (an input not described with its type, a body step that did not finish in C alone: it failed,
deferred to Python or left an output unanswered, a result that does not fit its block, scan outputs of no
iteration or of different shapes, scan inputs of different extents, or a run whose checks
watch every iteration, `run->checked`) returns 1, not started, with any status released: the host runs the node
in Python, which computes it again from its inputs (the steps are pure) and reports what failed as it always
does. Nothing the step wrote is published then.
"""

from __future__ import annotations

CONTROL_SOURCE = """
#define FAST_IF 1
#define FAST_LOOP 2
#define FAST_SCAN 3
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

/* a scan output: `src` (one iteration's value) copied to place `slot` of planned output `o`, each place the bytes
 * of the first iteration's value (kept in `first`), whose shape every later iteration's must have */
static int fast_stack(const ort_abi_fast_run* run, const ort_abi_fast_output* o, const ort_abi_fast_value* src,
                      int64_t slot, int first_iteration, ort_abi_fast_value* first) {
  int64_t bytes;
  if (src->state != 1 || src->elem_type != o->elem_type || o->buffer < 0 || src->rank < 0
      || src->rank >= FAST_RANK || o->item_size <= 0) return 0;
  if (first_iteration) {
    *first = *src;
  } else if (src->rank != first->rank || src->count != first->count
             || (src->rank && memcmp(src->dims, first->dims, (size_t)src->rank * sizeof(int64_t)) != 0)) {
    return 0;
  }
  bytes = src->count * o->item_size;
  if (slot < 0 || (bytes && slot >= o->capacity / bytes)) return 0;
  if (bytes) memmove(run->bases[o->buffer] + o->offset + slot * bytes, src->data, (size_t)bytes);
  return 1;
}

/* the description of a stacked scan output: `places` of `first`'s shape, when the plan holds it */
static int fast_stacked(const ort_abi_fast_run* run, const ort_abi_fast_output* o, const ort_abi_fast_value* first,
                        int64_t places, ort_abi_fast_value* dst) {
  int64_t dims[FAST_RANK], count = 0;
  int32_t r;
  dims[0] = places;
  for (r = 0; r < first->rank; ++r) dims[r + 1] = first->dims[r];
  if (!fast_output_fits(run, o, dims, (size_t)first->rank + 1, &count)) return 0;
  *dst = *first;
  dst->writable = 0;
  dst->rank = first->rank + 1;
  memcpy(dst->dims, dims, (size_t)dst->rank * sizeof(int64_t));
  dst->count = count;
  dst->data = run->bases[o->buffer] + o->offset;
  return 1;
}

static int fast_loop_run(ort_abi_fast_run* run, const ort_abi_fast_step* s, OrtStatus** status) {
  const ort_abi_fast_control* k = s->control;
  const ort_abi_fast_step* body = (const ort_abi_fast_step*)k->bodies[0];
  ort_abi_fast_value* values = run->values;
  ort_abi_fast_value placed[FAST_OUTPUTS], first[FAST_OUTPUTS];
  int32_t n = k->carried, scans = s->output_count - k->carried, j;
  int64_t trips = INT64_MAX, i;
  int cond = 1;
  char* state;
  if (k->body_count != 1 || n < 0 || scans < 0 || s->input_count != n + 2 || k->param_count != n + 2
      || k->state_buffer < 0) return 1;
  if (s->inputs[0] >= 0 && !fast_scalar_int64(&values[s->inputs[0]], &trips)) return 1;
  if (s->inputs[1] >= 0 && !fast_scalar_bool(&values[s->inputs[1]], &cond)) return 1;
  for (j = 0; j < n; ++j) {
    if (s->inputs[2 + j] < 0 || values[s->inputs[2 + j]].state != 1) return 1;
  }
  for (j = 0; j < s->output_count; ++j) {
    if (s->outputs[j].value < 0) return 1;
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
    for (j = 0; j < scans; ++j) {  /* before the carried values move: a scan output may be a carried input */
      if (!fast_stack(run, &s->outputs[n + j], &values[k->results[0][1 + n + j]], i, i == 0, &first[j])) return 1;
    }
    for (j = 0; j < n; ++j) {
      if (!fast_place(run, &s->outputs[j], &values[k->results[0][1 + j]], &placed[j])) return 1;
      if (k->params[2 + j] >= 0) values[k->params[2 + j]] = placed[j];
    }
  }
  if (i == 0) {
    if (scans) return 1;  /* no iteration: the scan outputs' shapes are the body's declared ones (Python's) */
    for (j = 0; j < n; ++j) {
      if (!fast_place(run, &s->outputs[j], &values[s->inputs[2 + j]], &placed[j])) return 1;
    }
  }
  for (j = 0; j < scans; ++j) {
    if (!fast_stacked(run, &s->outputs[n + j], &first[j], i, &placed[n + j])) return 1;
  }
  fast_publish(run, s, placed);
  return 0;
}

static int fast_scan_run(ort_abi_fast_run* run, const ort_abi_fast_step* s, OrtStatus** status) {
  const ort_abi_fast_control* k = s->control;
  const ort_abi_fast_step* body = (const ort_abi_fast_step*)k->bodies[0];
  ort_abi_fast_value* values = run->values;
  ort_abi_fast_value placed[FAST_OUTPUTS], first[FAST_OUTPUTS];
  int32_t n = k->carried, ins = s->input_count - k->carried, outs = s->output_count - k->carried, j;
  int64_t steps = -1, t;
  if (k->body_count != 1 || n < 0 || ins < 1 || outs < 0 || k->param_count != s->input_count) return 1;
  for (j = 0; j < s->input_count; ++j) {
    const ort_abi_fast_value* v = s->inputs[j] >= 0 ? &values[s->inputs[j]] : NULL;
    if (v == NULL || v->state != 1) return 1;
    if (j < n) continue;
    if (v->rank < 1 || (steps >= 0 && v->dims[0] != steps) || k->item_sizes[j - n] <= 0) return 1;
    steps = v->dims[0];
  }
  for (j = 0; j < s->output_count; ++j) {
    if (s->outputs[j].value < 0) return 1;
  }
  if (steps <= 0) return 1;  /* no iteration: the scan outputs' shapes are the body's declared ones (Python's) */
  for (j = 0; j < n; ++j) {
    if (k->params[j] >= 0) values[k->params[j]] = values[s->inputs[j]];
  }
  for (t = 0; t < steps; ++t) {
    for (j = 0; j < ins; ++j) {
      const ort_abi_fast_value* x = &values[s->inputs[n + j]];
      ort_abi_fast_value* v = k->params[n + j] >= 0 ? &values[k->params[n + j]] : NULL;
      int64_t count = x->count / steps, at = k->reversed[j] ? steps - 1 - t : t;
      if (v == NULL) continue;
      *v = *x;
      v->writable = 0;
      v->rank = x->rank - 1;
      if (v->rank) memmove(v->dims, x->dims + 1, (size_t)v->rank * sizeof(int64_t));
      v->count = count;
      v->data = count ? (char*)x->data + at * count * k->item_sizes[j] : x->data;
    }
    if (fast_body_run(run, body, k->counts[0], status)) return 1;
    for (j = 0; j < outs; ++j) {  /* before the states move: a scan output may be a state input */
      int64_t slot = k->reversed[ins + j] ? steps - 1 - t : t;
      if (!fast_stack(run, &s->outputs[n + j], &values[k->results[0][n + j]], slot, t == 0, &first[j])) return 1;
    }
    for (j = 0; j < n; ++j) {
      if (!fast_place(run, &s->outputs[j], &values[k->results[0][j]], &placed[j])) return 1;
      if (k->params[j] >= 0) values[k->params[j]] = placed[j];
    }
  }
  for (j = 0; j < outs; ++j) {
    if (!fast_stacked(run, &s->outputs[n + j], &first[j], steps, &placed[n + j])) return 1;
  }
  fast_publish(run, s, placed);
  return 0;
}

static int fast_control_run(ort_abi_fast_run* run, const ort_abi_fast_step* s, OrtStatus** status) {
  if (s->output_count > FAST_OUTPUTS) return 1;
  if (s->control->kind == FAST_IF) return fast_if_run(run, s, status);
  if (s->control->kind == FAST_LOOP) return fast_loop_run(run, s, status);
  if (s->control->kind == FAST_SCAN) return fast_scan_run(run, s, status);
  return 1;
}
"""
