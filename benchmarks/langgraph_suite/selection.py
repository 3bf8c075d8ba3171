"""Which of LangGraph's tests are measured, per LangGraph version.

FILES are the 19 files of ``libs/langgraph/tests`` that test the graph API a program
uses (building, running, persistence, interrupts, time travel, subgraphs, retries,
runtime, state schemas). Files about LangGraph's own checkpoint migrations, its
streaming-events v3 protocol, its remote-graph client, LangSmith tracing and its serde
allow-lists are not in the measure.

DESELECTED lists, per tag, the tests of LangGraph's private internals: they drive a
private class or function (``langgraph._internal.*``, ``langgraph.pregel._*``, names with
a leading underscore) directly, so no port of a program could ever meet them. A test that
only uses LangGraph's constants in an expected value (``PULL``, ``PUSH``, ``ERROR``) or a
config hook stays selected: what it asserts is behaviour. Entries are function names;
every parametrization of a listed function is left out. A listed name that is not
collected is reported by the runner (the list is stale for that tag).
"""

from __future__ import annotations

FILES: tuple[str, ...] = (
    "test_pregel.py",
    "test_pregel_async.py",
    "test_state.py",
    "test_channels.py",
    "test_interruption.py",
    "test_messages_state.py",
    "test_large_cases.py",
    "test_large_cases_async.py",
    "test_time_travel.py",
    "test_time_travel_async.py",
    "test_subgraph_persistence.py",
    "test_subgraph_persistence_async.py",
    "test_parent_command.py",
    "test_parent_command_async.py",
    "test_pydantic.py",
    "test_retry.py",
    "test_runtime.py",
    "test_managed_values.py",
    "test_type_checking.py",
)

_V1_2_11: dict[str, tuple[str, ...]] = {
    "test_pregel.py": (
        # PregelLoop / PregelRunner objects: reference counts and the loop's own
        # put_writes calls.
        "test_pregel_loop_refcount",
        "test_no_redundant_put_writes_for_cached_task",
        # DeltaChannel with the private _messages_delta_reducer: a storage format of
        # LangGraph's checkpoints.
        "test_delta_channel_end_to_end_inmemory",
        "test_delta_channel_time_travel",
        "test_delta_channel_remove_message_end_to_end",
        "test_delta_channel_update_by_id_end_to_end",
        "test_delta_channel_durability_exit_stores_snapshot",
        "test_delta_channel_async_write_ordering",
    ),
    "test_pregel_async.py": (
        # The same loop internals, and the private AsyncQueue of astream.
        "test_pregel_loop_refcount",
        "test_no_redundant_put_writes_for_cached_task",
        "test_delta_channel_durability_exit_stores_snapshot_async",
        "test_astream_waiter_cleanup_on_cancel",
    ),
    "test_state.py": (
        # Private helpers of langgraph.graph.state (_warn_invalid_state_schema,
        # _get_node_name, _is_field_channel).
        "test_warns_invalid_schema",
        "test_doesnt_warn_valid_schema",
        "test__get_node_name",
        "test_is_field_channel",
    ),
    "test_channels.py": (
        # Channel objects driven by hand against the private MISSING sentinel.
        "test_last_value",
        "test_topic",
        "test_topic_accumulate",
        "test_binop",
        "test_untracked_value",
        # The private Overwrite encoding (_get_overwrite, OVERWRITE).
        "test_overwrite_dataclass_form_survives_json_roundtrip",
        "test_overwrite_sentinel_dict_still_recognised",
        "test_overwrite_non_matching_dict_not_recognised",
        # DeltaChannel's checkpoint format and its private reducer and snapshot types.
        "test_delta_channel_basic_two_steps",
        "test_delta_channel_from_checkpoint_writes_list",
        "test_delta_channel_from_checkpoint_backwards_compat",
        "test_delta_channel_overwrite",
        "test_delta_channel_remove_message_and_replay",
        "test_delta_channel_update_by_id_and_replay",
        "test_delta_channel_dict_coercion",
        "test_messages_delta_reducer_coerces_state",
        "test_messages_delta_reducer_tuple_write_is_one_message",
        "test_delta_channel_checkpoint_returns_missing",
        "test_delta_channel_snapshot_version_based",
        "test_delta_channel_inmemory_saver_assembles_writes",
        "test_delta_channel_overwrite_superstep_snapshots",
        "test_delta_channel_replay_after_overwrite_snapshot",
        "test_delta_channel_dict_reducer_fresh_channel",
        # The private _get_channel of langgraph.graph.state (a field's channel object).
        "test_delta_channel_dict_reducer_backwards_compat",
        "test_delta_channel_dict_reducer_basic_updates",
        "test_delta_channel_dict_reducer_writes_reconstruction",
        "test_delta_channel_dict_reducer_with_deletions",
        "test_delta_channel_dict_reducer_overwrite_in_update",
        "test_delta_channel_dict_reducer_overwrite_in_writes_replay",
        "test_delta_channel_dict_reducer_with_notrequired_annotation",
        "test_delta_channel_from_checkpoint_honors_seed",
        "test_delta_channel_from_checkpoint_seed_without_writes",
    ),
    "test_pydantic.py": (
        # langgraph._internal._pydantic.is_supported_by_pydantic.
        "test_is_supported_by_pydantic",
    ),
    "test_runtime.py": (
        # Writes a foreign object into LangGraph's private runtime config slot.
        "test_foreign_object_in_runtime_slot_is_coerced",
    ),
    "test_retry.py": (
        # The private retry machinery (_should_retry_on, run_with_retry /
        # arun_with_retry, _ensure_execution_info, _checkpoint_ns_for_parent_command).
        "test_should_retry_on_single_exception",
        "test_should_retry_on_sequence_of_exceptions",
        "test_should_retry_on_subclass_of_exception",
        "test_should_retry_on_callable",
        "test_should_retry_on_invalid_type",
        "test_should_retry_on_empty_sequence",
        "test_should_retry_default_retry_on",
        "test_checkpoint_ns_for_parent_command",
        "test_ensure_execution_info_noop_when_already_set",
        "test_ensure_execution_info_creates_from_config",
        "test_ensure_execution_info_falls_back_to_task_id",
        "test_run_with_retry_creates_execution_info_when_missing",
        "test_run_with_retry_rejects_sync_timeout_without_starting_proc",
        "test_run_with_retry_without_timeout_runs_sync_directly",
        "test_run_with_retry_sync_node_raising_cancelled_becomes_node_cancelled",
        "test_arun_with_retry_timeout_ok_when_fast",
        "test_arun_with_retry_timeout_retries_when_retry_on_timeout",
        "test_arun_with_retry_timeout_accepts_timedelta",
        "test_arun_with_retry_timeout_fires_async",
        "test_arun_with_retry_run_timeout_is_not_refreshed_by_heartbeat",
        "test_node_timeout_error_carries_both_configured_timeouts",
        "test_arun_with_retry_does_not_swallow_proc_asyncio_timeout",
        "test_arun_with_retry_does_not_swallow_proc_node_timeout",
        "test_arun_with_retry_idle_timeout_resets_on_stream_event",
        "test_arun_with_retry_idle_timeout_resets_on_runtime_stream_writer",
        "test_astream_with_retry_idle_timeout_resets_on_yielded_chunks",
        "test_arun_with_retry_idle_timeout_resets_on_runtime_heartbeat",
        "test_arun_with_retry_heartbeat_refresh_mode_ignores_stream_events",
        "test_arun_with_retry_heartbeat_refresh_mode_accepts_heartbeat",
        "test_arun_with_retry_idle_timeout_resets_on_callback_event",
        "test_arun_with_retry_idle_timeout_preserves_existing_callbacks",
        "test_arun_with_retry_timeout_discards_stale_executor_writes",
        "test_arun_with_retry_timeout_discards_pre_timeout_writes",
        "test_astream_with_retry_timeout_discards_pre_timeout_writes",
        "test_arun_with_retry_timeout_cannot_be_swallowed",
        "test_astream_with_retry_timeout_cannot_be_swallowed",
        "test_arun_with_retry_timeout_observer_tracks_attempts",
        "test_arun_with_retry_timeout_observer_emits_progress_on_heartbeat",
        "test_arun_with_retry_timeout_observer_treats_parent_command_as_non_error",
        "test_arun_with_retry_timeout_observer_finishes_when_parent_writer_errors",
        "test_arun_with_retry_timeout_observer_treats_bubble_up_as_non_error",
        "test_arun_with_retry_observer_emits_finish_before_retry_backoff",
        "test_arun_with_retry_observer_emits_finish_before_final_raise_on_exhaustion",
        "test_sync_sleep_in_async_node_bypasses_timeout_and_emits_finish_success",
        "test_arun_with_retry_user_raised_cancelled_becomes_node_cancelled",
        "test_arun_with_retry_user_raised_cancelled_with_timeout_policy",
        "test_arun_with_retry_external_cancel_propagates_as_cancelled",
        # The private timeout machinery (coerce_timeout_policy, _TimedAttemptScope), the
        # msgpack serde of Send, and PregelNode / RunnableCallable objects.
        "test_coerce_timeout_policy_scalar_is_run_timeout",
        "test_coerce_timeout_policy_returns_same_instance_for_already_coerced",
        "test_idle_timeout_guard_call_does_not_hold_scope_lock",
        "test_idle_timeout_guard_stream_does_not_hold_scope_lock",
        "test_idle_timeout_guard_stream_writer_does_not_hold_scope_lock",
        "test_send_timeout_round_trips_through_msgpack_serde",
        "test_send_without_timeout_round_trips_through_msgpack_serde",
        "test_timeout_validation_is_eager_across_apis",
        "test_pregel_validate_rejects_sync_writer_timeout",
        "test_pregel_validate_accepts_runnable_callable_with_sync_and_async_timeout",
    ),
}

DESELECTED: dict[str, dict[str, tuple[str, ...]]] = {"1.2.11": _V1_2_11}
DEFAULT_TAG = "1.2.11"


def deselected_for(tag: str) -> dict[str, tuple[str, ...]]:
    """The deselect list for ``tag``; another tag uses the newest list (and says so)."""
    return DESELECTED.get(tag, DESELECTED[DEFAULT_TAG])
