"""What the engine knows of a job's parallel layout: which knob plays which role (tensor, pipeline, expert, data
parallel degrees, micro-batch, accumulation), the layouts a launcher rejects, and the design columns and priors
the search derives from them (the pipeline bubble, groups that leave a node, model-state bytes under sharding).
Pure: the run stage hands the contract's knobs and the launch over."""
