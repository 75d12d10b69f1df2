"""What an arm's run costs and how close it came to the hardware's limit: cost and energy per 1k output tokens
(`energy`), the decode roofline (`roofline`). They read the measured summaries and observations, so they sit above
`measure`; the formulas they apply are the hardware's (`specgate.hardware.economics`)."""
