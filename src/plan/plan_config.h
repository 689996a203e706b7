/* Plan-layer internals of plan_config.c, for the layer's own files and its tests. */
#ifndef UNROLL_PLAN_CONFIG_H
#define UNROLL_PLAN_CONFIG_H

#include "plan_yaml.h"

#include "unroll/plan.h"

/* The merged config tree (a map), borrowed from cfg. */
const ur_yval *ur_plan_config__root(const ur_config *cfg);

#endif
