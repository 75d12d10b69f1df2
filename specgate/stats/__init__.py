"""Statistics, pure functions with no pytest: the three-outcome decision of the regression comparisons, bootstrap
resampling, and the distribution test of sampled decoding."""
