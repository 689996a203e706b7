/* The config room's internals of config.c, for the layer's own files and its tests. */
#ifndef UNROLL_CONFIG_IMPL_H
#define UNROLL_CONFIG_IMPL_H

#include "config_yaml.h"

#include "unroll/config.h"

/* The merged config tree (a map), borrowed from cfg. */
const ur_yval *ur_config__root(const ur_config *cfg);

#endif
