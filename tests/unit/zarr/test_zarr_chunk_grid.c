#include "ur_test.h"
int main(void){return 0;}
