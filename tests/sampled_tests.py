"""The heaviest parametrized tests, sampled in the default run, and single heavy tests it leaves out: ``bash scripts/run-tests.sh`` runs one variant in
``every`` of each test named here (by collection order: the first, then every ``every``-th), ``bash
scripts/run-tests.sh --full`` runs them all.

Every derivative a test builds is built afresh by Enzyme (5-40 s each on the 2-core build machine), so these
tests, each a list of cases of one shape, took a third of the suite's time; the default run keeps cases of every
shape and the full run is the complete check (run it before a release or after a change to what they cover).
Chosen from ``--durations=0`` of a full run (2026-12-06: 8,434 s of test time on two workers, 71 min);
``tests/test_sampled_tests.py`` checks that each name still exists.
"""

from __future__ import annotations

#: ``path::test function`` -> keep one variant in this many.
SAMPLED = {
    "tests/test_selected_element.py::test_gradient_of_a_selected_element": 3,
    "tests/test_array_idioms.py::test_jacobian_and_vjp_of_an_array_result": 3,
    "tests/test_array_idioms.py::test_gradient_through_an_array_idiom": 3,
    "tests/test_array_idioms.py::test_gradient_of_a_scalar_idiom": 3,
    "tests/test_array_idioms.py::test_forward_mode_through_integer_arrays_the_function_allocates": 2,
    "tests/test_array_idioms.py::test_float32_gradient_through_an_array_idiom": 2,
    "tests/test_sorted_copies.py::test_sorted_then_copied_matches_jax": 3,
    "tests/test_parallel_races.py::test_blas_with_a_shared_operand_differentiates_in_parallel_without_a_race": 2,
    "tests/test_refusals.py::test_refusal_names_the_construct_and_its_line": 2,
    "tests/test_copied_slices.py::test_gradient_through_a_copied_slice_matches_jax": 2,
    "tests/test_linalg.py::test_solve_gradient": 2,
    "tests/test_linalg.py::test_products": 2,
    "tests/test_linalg.py::test_matrix_norms_of_order_one_and_inf": 2,
    "tests/test_views_more.py::test_jacobian_of_a_view": 3,
    "tests/test_views_more.py::test_jvp_and_vjp_of_a_view": 2,
    "tests/test_checkpointing.py::test_gradient_matches_plain_pyjlad_and_jax": 2,
    "tests/test_linalg_errors.py::test_rejected_matrix_raises_the_functions_error": 2,
    "tests/test_gpu_static.py::test_cpu_compiled_body_matches_jax_and_the_embedded_engine": 2,
    "tests/test_repeated_calls_memory.py::test_repeated_calls_reach_a_steady_state": 2,
    "tests/test_invariant_reads.py::test_hessian_vector_products_against_jax": 2,
    "tests/test_invariant_reads.py::test_gradients_against_jax": 2,
    "tests/test_corpus.py::test_program": 2,
    # Added 2026-12-06 (each 70-250 s in the CI runs of that day, on one worker): the Hessian through
    # np.transpose(x, axes) (its set of axes builds with loose types) and the refused n-body Hessian.
    "tests/test_views_more.py::test_hessian_through_an_axis_reordering": 2,
    "tests/test_float_fills.py::test_a_refused_n_body_hessian_names_the_rewrite_that_works": 2,
    # Added 2026-12-07: six programs at two points, each a derivative built afresh (a child process for reverse
    # over reverse).
    "tests/test_nested_early_exits.py::test_reverse_over_reverse_is_refused_or_right_and_returns": 2,
    "tests/test_nested_early_exits.py::test_forward_over_reverse_the_refusal_names_is_right": 2,
}


#: Single tests (a variant, or a test of its own) the default run leaves out, each a minute or more in the CI runs
#: of 2026-12-07 (``--durations=0`` of a fresh-clone run, 60-230 s on one worker beside other work), where a
#: cheaper test of the same shape stays in it; ``--full`` runs them. A sampled family's count skips them, so that
#: another variant of that family is kept.
FULL_ONLY = {
    # the other helper, whole_rows, stays (the same refusal and advice)
    "tests/test_float_fills.py::test_a_refused_n_body_hessian_names_the_rewrite_that_works[element_loop]",
    # the other axis reordering stays
    "tests/test_views_more.py::test_hessian_through_an_axis_reordering[rot90]",
    # a wrong Hessian first called at zeros, and a Hessian-vector product of a max, stay (the same check)
    "tests/test_loose_check.py::test_a_wrong_loose_typed_hessian_vector_product_is_refused",
    # the other percentile and quantile cases stay
    "tests/test_sorted_copies.py::test_sorted_then_copied_matches_jax[percentile_of_the_upper_part-7]",
    # the other forward-mode views stay
    "tests/test_views_more.py::test_jacobian_of_a_view[moveaxis-forward]",
    # 212 s of the 2026-12-07 fresh-clone run; its forward twin, and x.transpose(axes) in reverse, stay
    "tests/test_views_more.py::test_jacobian_of_a_view[moveaxis two axes-reverse]",
    # 58 s alone (2026-12-07): np.quantile reaches the same helper as np.percentile, whose case stays
    "tests/test_repeated_calls_memory.py::test_gradients_through_percentiles_give_back_what_they_allocate[quantile]",
}


def left_out(nodeids: list[str]) -> set[str]:
    """The node ids (``path::test[variant]``) the default run leaves out of ``nodeids`` (in collection order).

    >>> sorted(left_out(["tests/test_linalg.py::test_products[a]", "tests/test_linalg.py::test_products[b]",
    ...                  "tests/test_linalg.py::test_products[c]", "tests/test_linalg.py::test_seed001_verbatim"]))
    ['tests/test_linalg.py::test_products[b]']
    """
    seen: dict[str, int] = {}
    out = set(FULL_ONLY).intersection(nodeids)
    for nodeid in nodeids:
        if nodeid in FULL_ONLY:
            continue
        family = nodeid.split("[", 1)[0]
        every = SAMPLED.get(family)
        if every is None or "[" not in nodeid:
            continue
        index = seen.get(family, 0)
        seen[family] = index + 1
        if index % every:
            out.add(nodeid)
    return out
