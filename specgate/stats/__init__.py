"""Statistics, pure functions with no pytest: the tests and intervals of the regression comparisons, bootstrap
resampling, and the distribution test of sampled decoding."""
