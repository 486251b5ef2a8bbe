from deploy.lag import histogram_quantile


def test_quantile_is_the_upper_bound_of_the_bucket_holding_it() -> None:
    buckets = [({"le": "0.1"}, 50.0), ({"le": "0.5"}, 90.0), ({"le": "1.0"}, 99.0),
               ({"le": "+Inf"}, 100.0)]
    assert histogram_quantile(buckets, 0.5) == 0.1
    assert histogram_quantile(buckets, 0.9) == 0.5
    assert histogram_quantile(buckets, 0.95) == 1.0


def test_empty_histogram_has_no_quantile() -> None:
    assert histogram_quantile([], 0.5) is None
    assert histogram_quantile([({"le": "+Inf"}, 0.0)], 0.5) is None
