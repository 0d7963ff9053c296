/*
 * abi_dump.c - prints the size and field offsets of every public struct of kvtier.h as JSON, for
 * tests/python/test_abi.py, which compares them with the ctypes declarations of the Python
 * package (client/python/kvtier/_lib.py).
 *
 * Design: one table row per struct, one FIELD per member, written against the header; a member
 * added to the header changes sizeof (or is named by the test's header parse), so the table
 * cannot silently fall behind. Threads: none. Output: {"kvt_x_t": {"size": N, "fields":
 * {"name": offset, ...}}, ...} on stdout.
 */
#include <stddef.h>
#include <stdio.h>

#include "kvtier.h"

#define FIELD(type, name) printf("%s\"%s\": %zu", first++ ? ", " : "", #name, offsetof(type, name))
#define OPEN(type)                                                                                 \
    printf("%s\"%s\": {\"size\": %zu, \"fields\": {", nstruct++ ? ", " : "", #type, sizeof(type))
#define CLOSE() printf("}}")

int main(void)
{
    int nstruct = 0, first;

    printf("{");
    first = 0, OPEN(kvt_hash_t);
    FIELD(kvt_hash_t, b);
    CLOSE();

    first = 0, OPEN(kvt_ns_desc_t);
    FIELD(kvt_ns_desc_t, model), FIELD(kvt_ns_desc_t, dtype), FIELD(kvt_ns_desc_t, chunk_tokens);
    FIELD(kvt_ns_desc_t, num_layers), FIELD(kvt_ns_desc_t, num_kv_heads);
    FIELD(kvt_ns_desc_t, head_dim), FIELD(kvt_ns_desc_t, world_size), FIELD(kvt_ns_desc_t, mla);
    FIELD(kvt_ns_desc_t, hash_seed), FIELD(kvt_ns_desc_t, tenant), FIELD(kvt_ns_desc_t, revision);
    CLOSE();

    first = 0, OPEN(kvt_connect_opts_t);
    FIELD(kvt_connect_opts_t, timeout_ms), FIELD(kvt_connect_opts_t, data_path);
    FIELD(kvt_connect_opts_t, max_in_flight), FIELD(kvt_connect_opts_t, verify);
    CLOSE();

    first = 0, OPEN(kvt_server_info_t);
    FIELD(kvt_server_info_t, lease_ms), FIELD(kvt_server_info_t, max_chunk_bytes);
    FIELD(kvt_server_info_t, max_chunks), FIELD(kvt_server_info_t, daemon_version);
    FIELD(kvt_server_info_t, features), FIELD(kvt_server_info_t, max_in_flight);
    FIELD(kvt_server_info_t, arena_gen);
    CLOSE();

    first = 0, OPEN(kvt_lookup_opts_t);
    FIELD(kvt_lookup_opts_t, all_ranks), FIELD(kvt_lookup_opts_t, lease);
    FIELD(kvt_lookup_opts_t, has_prompt), FIELD(kvt_lookup_opts_t, prompt_tokens);
    FIELD(kvt_lookup_opts_t, hbm_tokens);
    CLOSE();

    first = 0, OPEN(kvt_lookup_result_t);
    FIELD(kvt_lookup_result_t, hit), FIELD(kvt_lookup_result_t, skipped);
    FIELD(kvt_lookup_result_t, leased), FIELD(kvt_lookup_result_t, lease_ms);
    FIELD(kvt_lookup_result_t, nranks), FIELD(kvt_lookup_result_t, rank_hits);
    FIELD(kvt_lookup_result_t, rank_hits_cap), FIELD(kvt_lookup_result_t, lease_capped);
    CLOSE();

    first = 0, OPEN(kvt_save_opts_t);
    FIELD(kvt_save_opts_t, parent), FIELD(kvt_save_opts_t, has_op_id),
        FIELD(kvt_save_opts_t, op_id);
    CLOSE();

    first = 0, OPEN(kvt_gate_state_t);
    FIELD(kvt_gate_state_t, payoff), FIELD(kvt_gate_state_t, share),
        FIELD(kvt_gate_state_t, act_ema);
    FIELD(kvt_gate_state_t, probes), FIELD(kvt_gate_state_t, lookups);
    FIELD(kvt_gate_state_t, admission_enabled), FIELD(kvt_gate_state_t, skip_enabled);
    FIELD(kvt_gate_state_t, load_bearing), FIELD(kvt_gate_state_t, policy);
    FIELD(kvt_gate_state_t, density), FIELD(kvt_gate_state_t, served_tokens);
    FIELD(kvt_gate_state_t, regret_tokens), FIELD(kvt_gate_state_t, written_tokens);
    FIELD(kvt_gate_state_t, declined_tokens);
    CLOSE();

    first = 0, OPEN(kvt_reason_t);
    FIELD(kvt_reason_t, name), FIELD(kvt_reason_t, count);
    CLOSE();

    first = 0, OPEN(kvt_tally_tokens_t);
    FIELD(kvt_tally_tokens_t, served_tokens_total), FIELD(kvt_tally_tokens_t, lookup_tokens_total);
    CLOSE();

    first = 0, OPEN(kvt_tally_req_t);
    FIELD(kvt_tally_req_t, engine_id), FIELD(kvt_tally_req_t, paid_total);
    FIELD(kvt_tally_req_t, probes_total), FIELD(kvt_tally_req_t, reasons);
    FIELD(kvt_tally_req_t, nreasons), FIELD(kvt_tally_req_t, has_tokens);
    FIELD(kvt_tally_req_t, served_tokens_total), FIELD(kvt_tally_req_t, lookup_tokens_total);
    CLOSE();

    first = 0, OPEN(kvt_submit_opts_t);
    FIELD(kvt_submit_opts_t, user), FIELD(kvt_submit_opts_t, timeout_ms);
    CLOSE();

    first = 0, OPEN(kvt_completion_t);
    FIELD(kvt_completion_t, handle), FIELD(kvt_completion_t, user), FIELD(kvt_completion_t, op);
    FIELD(kvt_completion_t, status), FIELD(kvt_completion_t, error), FIELD(kvt_completion_t, n);
    FIELD(kvt_completion_t, outcomes), FIELD(kvt_completion_t, lens), FIELD(kvt_completion_t, ptrs);
    FIELD(kvt_completion_t, checksums), FIELD(kvt_completion_t, nhit);
    FIELD(kvt_completion_t, hold_until_ms), FIELD(kvt_completion_t, lookup);
    FIELD(kvt_completion_t, gates);
    CLOSE();

    first = 0, OPEN(kvt_stats_t);
    FIELD(kvt_stats_t, submitted), FIELD(kvt_stats_t, completed), FIELD(kvt_stats_t, failed);
    FIELD(kvt_stats_t, timeouts), FIELD(kvt_stats_t, recoveries), FIELD(kvt_stats_t, remaps);
    FIELD(kvt_stats_t, chunks_verified), FIELD(kvt_stats_t, checksum_mismatches);
    FIELD(kvt_stats_t, releases_sent), FIELD(kvt_stats_t, bytes_copied);
    FIELD(kvt_stats_t, inline_calls), FIELD(kvt_stats_t, in_flight), FIELD(kvt_stats_t, queued);
    FIELD(kvt_stats_t, max_in_flight);
    CLOSE();

    first = 0, OPEN(kvt_arena_t);
    FIELD(kvt_arena_t, base), FIELD(kvt_arena_t, bytes), FIELD(kvt_arena_t, gen);
    FIELD(kvt_arena_t, maps);
    CLOSE();

    first = 0, OPEN(kvt_link_t);
    FIELD(kvt_link_t, down), FIELD(kvt_link_t, down_wait_ms), FIELD(kvt_link_t, down_for_ms);
    FIELD(kvt_link_t, disconnects), FIELD(kvt_link_t, unavailable);
    CLOSE();
    printf("}\n");
    return 0;
}
