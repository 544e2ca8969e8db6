#include "qos/scheduler.h"
